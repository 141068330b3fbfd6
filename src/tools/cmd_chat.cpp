// weir chat: a conversation in the terminal. Each turn is rendered with the
// model's chat template (text/chat_template.h) and only the tokens past
// what the cache already holds are computed; the answer streams as it is
// generated. Ctrl-C stops the answer (not the program), /clear starts over,
// Ctrl-D (end of input) or /exit leaves. A template that writes Harmony
// (gpt-oss's) has its answers split (text/harmony.h): the analysis goes to
// stderr, the final text to stdout and into the conversation (the template
// refuses <|channel|> tags in a message's content).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/generator.h"
#include "engine/sampler.h"
#include "engine/spec_setup.h"
#include "engine/session.h"
#include "text/chat_template.h"
#include "text/harmony.h"
#include "text/utf8_streamer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/common.h"
#include "tools/runtime_flags.h"
#include "tools/signals.h"
#include "tools/spec_flags.h"

namespace weir::tools {
namespace {

jinja::Value message(const char* role, const std::string& content) {
  jinja::Dict d;
  d.set(jinja::Value("role"), jinja::Value(role));
  d.set(jinja::Value("content"), jinja::Value(content));
  return jinja::Value::dict(std::move(d));
}

// Shows a Harmony answer's pieces as they come: reasoning on stderr, the
// rest on stdout and into `answer`.
void show_harmony(const HarmonyText& t, std::string& answer, bool& reasoned) {
  if (!t.reasoning.empty()) {
    std::fputs(t.reasoning.c_str(), stderr);
    reasoned = true;
  }
  std::string shown = t.content;
  for (const HarmonyCall& c : t.calls) shown += c.text;  // no tools here: as written
  if (shown.empty()) return;
  if (reasoned) std::fputs("\n", stderr);
  reasoned = false;
  answer += shown;
  write_stdout(shown);
}

}  // namespace

int cmd_chat(int argc, char** argv) {
  std::string model_path, system_prompt, template_file;
  int n_predict = -1;
  bool ignore_eos = false;
  SamplerParams sp;
  RuntimeFlags rf;
  SpecFlags specf;
  Args a("chat", "Talk with a model in the terminal: Ctrl-C stops an answer, /clear starts over, Ctrl-D or /exit leaves.");
  a.opt("-m,--model", &model_path, "FILE", "GGUF model to talk with (required)")
      .opt("--system", &system_prompt, "TEXT", "a system message that begins the conversation")
      .opt("--chat-template-file", &template_file, "FILE", "a Jinja chat template instead of the model's")
      .opt("-n,--n-predict", &n_predict, "N", "most tokens an answer may have (default -1: until the model ends it)");
  add_sampling_flags(a, &sp);
  a.opt("-s,--seed", &sp.seed, "N", "random seed (default 0: a random one)")
      .flag("--ignore-eos", &ignore_eos, "answers go on past end-of-generation tokens (until -n or the context)");
  rf.add_to(a, {});
  specf.add_to(a);
  if (!a.parse(argc, argv)) return 0;
  rf.parsed(a);
  const SpecOptions spec_opts = specf.options(a);
  RuntimeSpec spec = rf.spec(model_path);
  if (spec_opts.mode != SpecMode::Off) spec.max_graphs = std::max(spec.max_graphs, Generator::kSpecGraphs);
  if (n_predict < -1 || n_predict == 0)
    throw UsageError("-n: expected -1 (until the model ends the answer) or a count of tokens, got " + std::to_string(n_predict));
  check_sampling(sp);

  Runtime rt = build_runtime(spec);
  refuse_embeddings_only(*rt.model, "chat");
  const Model* model = rt.model.get();
  const Tokenizer& tok = model->tokenizer();
  const ChatTemplate chat = chat_template_for(*model, template_file);
  const bool harmony = is_harmony_template(chat.source());
  Session* session = rt.session.get();
  const int64_t n_ctx = session->n_ctx();
  Sampler sampler(sp, int(model->hparams().n_vocab));
  SpecSetup specs = make_spec(spec_opts, spec, rt);
  GeneratorSampling how;
  how.on_backend = !rt.backends.backend->host_visible_memory();
  how.backend = backend_sampling(sp, sampler.seed());
  how.host = &sampler;

  const bool tty = isatty(STDIN_FILENO);
  std::fprintf(stderr, "weir chat: %s (template: %s). Ctrl-C stops an answer, /clear starts over, Ctrl-D leaves.\n",
               model_path.c_str(), chat.origin().c_str());
  std::vector<jinja::Value> history;
  if (!system_prompt.empty()) history.push_back(message("system", system_prompt));
  std::vector<int32_t> cached;  // the tokens in the session's cache, in order
  std::optional<DraftLength> learnt;  // the draft-length rule's costs and acceptance so far
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
    HarmonyReader reader;
    bool reasoned = false;
    bool prompt_done = false;
    // Each answer is one generator's run: its tokens come a step at a time
    // (one, or the guesses the model kept and its own token).
    Generator gen = learnt ? Generator(*session, how, specs.proposer.get(), *learnt)
                           : Generator(*session, how, specs.proposer.get(), spec_opts.length);
    size_t said = 0;  // answer tokens shown
    try {
      std::vector<int32_t> pending = {gen.start(ids, same)};
      cached = ids;
      prompt_done = true;
      for (size_t k = 0; n_predict < 0 || said < size_t(n_predict); ++k) {
        if (k == pending.size()) {
          const int64_t left = n_predict < 0 ? int64_t(1) << 20 : int64_t(n_predict) - int64_t(said);
          const int64_t room = n_ctx - session->n_past() - 1;
          if (room < 1) break;
          pending = gen.next(int(std::min<int64_t>(left, room)));
          k = 0;
        }
        const int32_t next = pending[k];
        if ((!ignore_eos && tok.vocab().is_eog(next)) || int64_t(ids.size() + said) + 1 >= n_ctx) break;
        const std::string piece = out.push(tok.token_to_piece(next, false));
        if (harmony) {
          show_harmony(reader.push(piece), answer, reasoned);
        } else {
          answer += piece;
          write_stdout(piece);
        }
        ++said;
        if (stop_requested()) break;
      }
    } catch (const Cancelled&) {
      if (!prompt_done) {  // stopped between the prompt's batches: some of it is in the cache
        session->reset();
        cached.clear();
      }
    }
    gen.finish();
    learnt = gen.draft_length();  // the next answer starts from what this one learnt
    if (prompt_done) {
      // The cache keeps the conversation: the prompt and the answer's tokens
      // shown (guesses past them, and the one sampled after, let go).
      const std::vector<int32_t>& all = gen.tokens();
      const size_t keep = std::min<size_t>(size_t(session->n_past()), ids.size() + said);
      session->truncate(0, int64_t(keep));
      cached.assign(all.begin(), all.begin() + std::ptrdiff_t(keep));
    }
    const std::string tail = out.flush();
    if (harmony) {
      show_harmony(reader.push(tail), answer, reasoned);
      show_harmony(reader.finish(), answer, reasoned);
      write_stdout("\n");
    } else {
      answer += tail;
      write_stdout(tail + "\n");
    }
    if (take_back_interrupt()) std::fprintf(stderr, "(stopped)\n");
    if (stop_requested()) break;
    history.push_back(message("assistant", answer));
  }
  if (tty) write_stdout("\n");
  take_back_interrupt();  // a Ctrl-C at the prompt before Ctrl-D: still a normal end
  return stop_requested() ? stop_exit_code() : 0;
}

}  // namespace weir::tools
