// weir run: generate text from a prompt, streaming only the generated text to
// stdout; timings go to stderr.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "text/utf8_streamer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/common.h"

namespace weir::tools {

int cmd_run(int argc, char** argv) {
  std::string model_path, prompt, prompt_file;
  int n_predict = 128, threads = default_threads();
  std::string numa = "off";
  int64_t n_ctx = 4096, n_batch = 512;
  bool ignore_eos = false, no_bos = false;
  int ngl = 0, device = 0;
  SamplerParams sp;
  Args a("run", "Generate text from a prompt. Only generated text goes to stdout.");
  a.opt("-m,--model", &model_path, "FILE", "GGUF model to run (required)")
      .opt("-p,--prompt", &prompt, "TEXT", "prompt text")
      .opt("-f,--file", &prompt_file, "FILE", "read the prompt from a file")
      .opt("-n,--n-predict", &n_predict, "N", "tokens to generate (default 128; -1: until end of generation or context)")
      .opt("--temp", &sp.temperature, "T", "temperature; 0 is greedy and deterministic (default 0.8)")
      .opt("--top-k", &sp.top_k, "K", "keep the K most likely tokens (default 40; 0: off)")
      .opt("--top-p", &sp.top_p, "P", "nucleus sampling threshold (default 0.95; 1: off)")
      .opt("--min-p", &sp.min_p, "P", "drop tokens below P x the top probability (default 0.05; 0: off)")
      .opt("--repeat-penalty", &sp.repeat_penalty, "X", "penalty for repeated tokens (default 1.0: off)")
      .opt("--repeat-last-n", &sp.repeat_last_n, "N", "tokens the repeat penalty looks back over (default 64)")
      .opt("-s,--seed", &sp.seed, "N", "random seed (default 0: a random one)")
      .opt("-t,--threads", &threads, "N", "CPU threads (default: all CPUs)")
      .opt("--numa", &numa, "MODE", "off (default), distribute (threads and weight rows spread over NUMA nodes) or isolate (only the node weir starts on)")
      .opt("-ngl,--n-gpu-layers", &ngl, "N", "0: CPU (default); 99: the whole model on the GPU")
      .opt("--device", &device, "N", "the GPU to use with -ngl (default 0)")
      .opt("-c,--ctx-size", &n_ctx, "N", "context size in tokens (default 4096)")
      .opt("-b,--batch-size", &n_batch, "N", "prompt tokens per forward step (default 512)")
      .flag("--ignore-eos", &ignore_eos, "keep generating past end-of-generation tokens")
      .flag("--no-bos", &no_bos, "do not add the BOS token even if the model asks for it");
  if (!a.parse(argc, argv)) return 0;
  if (!prompt_file.empty()) {
    std::ifstream in(prompt_file, std::ios::binary);
    if (!in) throw Error(prompt_file + ": cannot read prompt file");
    std::stringstream ss;
    ss << in.rdbuf();
    prompt = ss.str();
  }
  if (threads < 1) throw UsageError("--threads must be at least 1");
  const cpu::NumaMode numa_mode = parse_numa_flag(numa);
  if (n_ctx < 1 || n_batch < 1) throw UsageError("--ctx-size and --batch-size must be positive");

  // Installed first, so an early Ctrl-C also ends the run cleanly.
  const auto& interrupted = install_interrupt_flag();
  double load_s = 0;
  auto model = load_model(model_path, &load_s);
  const Tokenizer& tok = model->tokenizer();
  CpuOptions cpu_opts;
  cpu_opts.numa = numa_mode;
  std::unique_ptr<Backend> backend_ptr = make_backend(*model, ngl, device, threads, cpu_opts);
  Backend& backend = *backend_ptr;
  SessionParams p;
  p.n_ctx = n_ctx;
  p.n_batch = n_batch;
  Session session(*model, backend, p);
  Sampler sampler(sp, int(model->hparams().n_vocab));
  // On a GPU the sampler runs there and only token ids come back, unless a
  // repetition penalty (which needs the CPU sampler's history) is asked for.
  const bool sample_on_backend = !backend.host_visible_memory() && (sp.repeat_penalty == 1.0f || sp.repeat_last_n == 0);
  BackendSampling bs;
  bs.temperature = sp.temperature;
  bs.top_k = sp.top_k;
  bs.top_p = sp.top_p;
  bs.min_p = sp.min_p;
  bs.seed = sampler.seed();

  std::vector<int32_t> ids = tok.encode(prompt, tok.vocab().add_bos && !no_bos, true);
  if (ids.empty()) throw UsageError("the prompt is empty (give -p TEXT or -f FILE)");
  if (int64_t(ids.size()) >= n_ctx)
    throw Error("the prompt has " + std::to_string(ids.size()) + " tokens, more than the context (" +
                std::to_string(n_ctx) + "); raise --ctx-size");

  auto t0 = std::chrono::steady_clock::now();
  int32_t next = -1;
  if (sample_on_backend)
    next = session.eval_sample(ids, bs);
  else
    session.eval(ids);
  const double prompt_s = seconds_since(t0);
  report_numa(backend);
  for (int32_t id : ids) sampler.accept(id);

  Utf8Streamer out;
  int n_gen = 0;
  const int64_t budget = n_predict < 0 ? n_ctx - int64_t(ids.size()) : std::min<int64_t>(n_predict, n_ctx - int64_t(ids.size()));
  t0 = std::chrono::steady_clock::now();
  // Sampling on the backend, the step for each token is queued before the
  // host waits for that token (Session::queue_sample_next), while the token
  // after it is wanted.
  if (sample_on_backend && budget > 1) session.queue_sample_next(bs);
  while (n_gen < budget && !interrupted.load()) {
    const int32_t id = sample_on_backend ? next : sampler.sample(session.logits());
    sampler.accept(id);
    ++n_gen;
    if (!ignore_eos && tok.vocab().is_eog(id)) break;
    const std::string text = out.push(tok.token_to_piece(id, false));
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    if (n_gen >= budget || interrupted.load()) break;
    if (sample_on_backend) {
      if (n_gen + 1 < budget) session.queue_sample_next(bs);
      next = session.take_sampled();
    } else {
      const int32_t step[1] = {id};
      session.eval(step);
    }
  }
  if (sample_on_backend) session.cancel_queued();  // stopped early: the steps past the last token
  const std::string rest = out.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  if (isatty(STDOUT_FILENO)) std::fputc('\n', stdout);  // a pipe gets exactly the generated text
  std::fflush(stdout);
  const double gen_s = seconds_since(t0);
  std::fprintf(stderr, "\nweir: load %.0f ms | prompt %zu tokens, %.1f t/s | generation %d tokens, %.1f t/s%s\n",
               load_s * 1e3, ids.size(), double(ids.size()) / prompt_s, n_gen,
               gen_s > 0 ? double(n_gen) / gen_s : 0.0, interrupted.load() ? " | interrupted" : "");
  return interrupted.load() ? 130 : 0;
}

}  // namespace weir::tools
