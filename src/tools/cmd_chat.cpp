// weir chat: a conversation in the terminal. Each turn is rendered with the
// model's chat template (text/chat_template.h) and only the tokens past
// what the cache already holds are computed; the answer streams as it is
// generated. Ctrl-C stops the answer (not the program), /clear starts over,
// Ctrl-D (end of input) or /exit leaves.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "text/chat_template.h"
#include "text/utf8_streamer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/common.h"
#include "tools/signals.h"

namespace weir::tools {
namespace {

jinja::Value message(const char* role, const std::string& content) {
  jinja::Dict d;
  d.set(jinja::Value("role"), jinja::Value(role));
  d.set(jinja::Value("content"), jinja::Value(content));
  return jinja::Value::dict(std::move(d));
}

}  // namespace

int cmd_chat(int argc, char** argv) {
  std::string model_path, system_prompt, template_file;
  int n_predict = -1, threads = default_threads(), ngl = 0;
  int64_t n_ctx = 4096, n_batch = 512;
  bool ignore_eos = false;
  SamplerParams sp;
  GpuFlags gpu_flags;
  KvFlags kv;
  Args a("chat", "Talk with a model in the terminal: Ctrl-C stops an answer, /clear starts over, Ctrl-D or /exit leaves.");
  a.opt("-m,--model", &model_path, "FILE", "GGUF model to talk with (required)")
      .opt("--system", &system_prompt, "TEXT", "a system message that begins the conversation")
      .opt("--chat-template-file", &template_file, "FILE", "a Jinja chat template instead of the model's")
      .opt("-n,--n-predict", &n_predict, "N", "most tokens an answer may have (default -1: until the model ends it)");
  add_sampling_flags(a, &sp);
  a.opt("-s,--seed", &sp.seed, "N", "random seed (default 0: a random one)")
      .opt("-t,--threads", &threads, "N", "CPU threads (default: all CPUs)")
      .opt("-ngl,--n-gpu-layers", &ngl, "N", "layers on the GPU (0: CPU, default; 99: the whole model)")
      .opt("-c,--ctx-size", &n_ctx, "N", "context size in tokens (default 4096, or the model's if smaller)")
      .opt("-b,--batch-size", &n_batch, "N", "prompt tokens per forward step (default 512)")
      .flag("--ignore-eos", &ignore_eos, "answers go on past end-of-generation tokens (until -n or the context)");
  gpu_flags.add_to(a);
  kv.add_to(a);
  if (!a.parse(argc, argv)) return 0;
  const DType kv_type = kv.resolve(serving_kv_type(ngl));
  if (n_predict < -1 || n_predict == 0)
    throw UsageError("-n: expected -1 (until the model ends the answer) or a count of tokens, got " + std::to_string(n_predict));
  check_threads(threads);
  check_sampling(sp);
  check_device_flag(a.given("--device"), ngl);
  if (n_ctx < 1) throw UsageError("--ctx-size: expected a positive number of tokens, got " + std::to_string(n_ctx));
  if (n_batch < 1) throw UsageError("--batch-size: expected a positive number of tokens, got " + std::to_string(n_batch));

  auto model = load_model(model_path);
  const Tokenizer& tok = model->tokenizer();
  const ChatTemplate chat = chat_template_for(*model, template_file);
  if (!a.given("-c") && model->hparams().n_ctx_train > 0) n_ctx = std::min(n_ctx, model->hparams().n_ctx_train);
  BackendFlags bf;
  bf.n_gpu_layers = ngl;
  gpu_flags.apply(bf);
  bf.threads = threads;
  bf.n_ctx = n_ctx;
  bf.kv_type = kv_type;
  BackendChoice choice = make_backend(*model, bf);
  SessionParams p;
  p.kv_type = kv_type;
  p.n_ctx = n_ctx;
  p.n_batch = std::min(n_batch, n_ctx);
  p.stop = &stop_flag();
  choice.join_group(p);
  std::unique_ptr<Session> session = make_session(*model, *choice.backend, p);
  Sampler sampler(sp, int(model->hparams().n_vocab));
  const bool on_backend = !choice.backend->host_visible_memory();
  const BackendSampling bs = backend_sampling(sp, sampler.seed());
  // Runs tokens and returns the token after them.
  auto step = [&](std::span<const int32_t> ids) -> int32_t {
    if (on_backend) return session->eval_sample(ids, bs);
    session->eval(ids);
    return sampler.sample(session->logits());
  };

  const bool tty = isatty(STDIN_FILENO);
  std::fprintf(stderr, "weir chat: %s (template: %s). Ctrl-C stops an answer, /clear starts over, Ctrl-D leaves.\n",
               model_path.c_str(), chat.origin().c_str());
  std::vector<jinja::Value> history;
  if (!system_prompt.empty()) history.push_back(message("system", system_prompt));
  std::vector<int32_t> cached;  // the tokens in the session's cache, in order
  std::string line;
  for (;;) {
    if (tty) write_stdout("> ");
    if (!std::getline(std::cin, line)) break;  // Ctrl-D
    take_back_interrupt();  // a Ctrl-C at the prompt only clears it
    if (stop_requested()) break;  // SIGTERM, SIGHUP
    if (line == "/exit" || line == "/quit") break;
    if (line == "/clear") {
      history.resize(system_prompt.empty() ? 0 : 1);
      session->reset();
      cached.clear();
      write_stdout("(conversation cleared)\n");
      continue;
    }
    if (line.empty()) continue;
    history.push_back(message("user", line));
    std::string prompt;
    try {
      prompt = chat.render(jinja::Value::list(history), true);
    } catch (const Error& e) {
      history.pop_back();
      std::fprintf(stderr, "weir chat: the chat template refused this turn: %s\n", e.what());
      continue;
    }
    const std::vector<int32_t> ids = tok.encode(prompt, false, true);
    // Only what the cache lacks: the turns so far are usually its prefix.
    size_t same = 0;
    while (same < ids.size() && same < cached.size() && ids[same] == cached[same]) ++same;
    if (same < cached.size() || same == ids.size()) {
      session->reset();
      cached.clear();
      same = 0;
    }
    if (int64_t(ids.size()) + 8 > n_ctx) {
      history.pop_back();
      std::fprintf(stderr, "weir chat: the conversation has %zu tokens, the context %lld; /clear, or raise --ctx-size\n",
                   ids.size(), static_cast<long long>(n_ctx));
      continue;
    }
    std::string answer;
    Utf8Streamer out;
    bool prompt_done = false;
    try {
      int32_t next = step(std::span<const int32_t>(ids).subspan(same));
      cached = ids;
      prompt_done = true;
      for (int n = 0; n_predict < 0 || n < n_predict; ++n) {
        if (next < 0) throw Error("the model computed no finite logit");
        if ((!ignore_eos && tok.vocab().is_eog(next)) || session->n_past() + 1 >= n_ctx) break;
        const std::string piece = out.push(tok.token_to_piece(next, false));
        answer += piece;
        write_stdout(piece);
        if (stop_requested()) break;
        const int32_t one[1] = {next};
        next = step(one);
        cached.push_back(one[0]);
      }
    } catch (const Cancelled&) {
      if (!prompt_done) {  // stopped between the prompt's batches: some of it is in the cache
        session->reset();
        cached.clear();
      }
    }
    const std::string tail = out.flush();
    answer += tail;
    write_stdout(tail + "\n");
    if (take_back_interrupt()) std::fprintf(stderr, "(stopped)\n");
    if (stop_requested()) break;
    history.push_back(message("assistant", answer));
  }
  if (tty) write_stdout("\n");
  take_back_interrupt();  // a Ctrl-C at the prompt before Ctrl-D: still a normal end
  return stop_requested() ? stop_exit_code() : 0;
}

}  // namespace weir::tools
