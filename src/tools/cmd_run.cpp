// weir run: generate text from a prompt, streaming only the generated text to
// stdout; timings, and why generation stopped, go to stderr.
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "core/error.h"
#include "engine/generator.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "engine/spec_setup.h"
#include "text/utf8_streamer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/common.h"
#include "tools/runtime_flags.h"
#include "tools/signals.h"
#include "tools/spec_flags.h"

namespace weir::tools {

int cmd_run(int argc, char** argv) {
  const auto t_start = std::chrono::steady_clock::now();  // for the time to the first token
  std::string model_path, prompt, prompt_file;
  int n_predict = 128;
  bool ignore_eos = false, no_bos = false, verbose = false;
  RuntimeFlags rf;
  SpecFlags specf;
  SamplerParams sp;
  Args a("run", "Generate text from a prompt. Only generated text goes to stdout.");
  a.opt("-m,--model", &model_path, "FILE", "GGUF model to run (required)")
      .opt("-p,--prompt", &prompt, "TEXT", "prompt text")
      .opt("-f,--file", &prompt_file, "FILE", "read the prompt from a file")
      .opt("-n,--n-predict", &n_predict, "N", "tokens to generate (default 128; -1: until end of generation or context)");
  add_sampling_flags(a, &sp);
  a.opt("--repeat-penalty", &sp.repeat_penalty, "X", "penalty for repeated tokens (default 1.0: off)")
      .opt("--repeat-last-n", &sp.repeat_last_n, "N", "tokens the repeat penalty looks back over (default 64)")
      .opt("-s,--seed", &sp.seed, "N", "random seed (default 0: a random one)")
      .flag("--ignore-eos", &ignore_eos, "keep generating past end-of-generation tokens")
      .flag("--no-bos", &no_bos, "do not add the BOS token even if the model asks for it")
      .flag("-v,--verbose", &verbose, "say on stderr what happens as it happens (load, prompt, generation)");
  rf.add_to(a, {});
  specf.add_to(a);
  if (!a.parse(argc, argv)) return 0;
  rf.parsed(a);
  const SpecOptions spec_opts = specf.options(a);
  RuntimeSpec spec = rf.spec(model_path);
  if (spec_opts.mode != SpecMode::Off) spec.max_graphs = std::max(spec.max_graphs, Generator::kSpecGraphs);
  if (n_predict < -1) throw UsageError("-n: expected -1 (until the end) or a count of tokens, got " + std::to_string(n_predict));
  check_sampling(sp);
  if (a.given("-p") && a.given("-f"))
    throw UsageError("give the prompt as -p TEXT or -f FILE, not both");
  if (!prompt_file.empty()) prompt = read_text_file(prompt_file, "-f");
  auto say = [&](const char* what) {
    if (verbose) std::fprintf(stderr, "weir: %s\n", what);
  };

  say("loading the model");
  Runtime rt = build_runtime(spec);
  refuse_embeddings_only(*rt.model, "run");
  // Load time: until every weight is where it will be read.
  const double load_s = rt.model_seconds + rt.backends.load.seconds;
  const Model& model = *rt.model;
  const Tokenizer& tok = model.tokenizer();
  const ModelBackends& choice = rt.backends;
  Backend& backend = *choice.backend;
  if (verbose) {
    std::fprintf(stderr, "weir: model read in %.0f ms; weights: %s\n", rt.model_seconds * 1e3, choice.placement.c_str());
    if (choice.load.bytes) std::fprintf(stderr, "weir: loaded %s\n", choice.load.summary().c_str());
  }
  if (spec_opts.mode == SpecMode::Draft) say("loading the draft model");
  SpecSetup specs = make_spec(spec_opts, spec, rt);
  if (verbose && specs.proposer) std::fprintf(stderr, "weir: speculative decoding: %s\n", specs.describe().c_str());
  Session& session = *rt.session;
  const int64_t n_ctx = session.n_ctx();
  Sampler sampler(sp, int(model.hparams().n_vocab));
  // On a GPU the sampler runs there and only token ids come back, unless a
  // repetition penalty (which needs the CPU sampler's history) is asked for.
  const bool sample_on_backend = !backend.host_visible_memory() && (sp.repeat_penalty == 1.0f || sp.repeat_last_n == 0);
  const BackendSampling bs = backend_sampling(sp, sampler.seed());

  std::vector<int32_t> ids = tok.encode(prompt, tok.vocab().add_bos && !no_bos, true);
  if (ids.empty()) throw UsageError("the prompt is empty (give -p TEXT or -f FILE)");
  if (int64_t(ids.size()) >= n_ctx)
    throw Error("the prompt has " + std::to_string(ids.size()) + " tokens, more than the context (" +
                std::to_string(n_ctx) + "); raise --ctx-size");

  if (verbose) std::fprintf(stderr, "weir: prompt of %zu tokens\n", ids.size());
  GeneratorSampling how;
  how.on_backend = sample_on_backend;
  how.backend = bs;
  how.host = &sampler;
  Generator gen(session, how, specs.proposer.get(), spec_opts.length);
  // Why generation ended, for the stats line.
  enum class Stop { Budget, EndToken, ContextFull, Signal } why = Stop::Budget;
  Utf8Streamer out;
  int n_gen = 0;
  const int64_t room = n_ctx - int64_t(ids.size());
  const bool until_end = n_predict < 0;
  const int64_t budget = until_end ? room : std::min<int64_t>(n_predict, room);
  auto t0 = std::chrono::steady_clock::now();
  double prompt_s = 0, first_token_s = 0;
  try {
    std::vector<int32_t> toks{gen.start(ids, 0)};
    prompt_s = seconds_since(t0);
    first_token_s = seconds_since(t_start);  // the next token is known
    report_numa(backend);
    say("generating");
    t0 = std::chrono::steady_clock::now();
    // Each call gives the tokens of one step: one, or the guesses the
    // target kept and its own token.
    while (n_gen < budget && !stop_requested()) {
      for (const int32_t id : toks) {
        ++n_gen;
        if (!ignore_eos && tok.vocab().is_eog(id)) {
          why = Stop::EndToken;
          break;
        }
        write_stdout(out.push(tok.token_to_piece(id, false)));
        if (n_gen >= budget) break;
      }
      if (why != Stop::Budget || n_gen >= budget || stop_requested()) break;
      toks = gen.next(int(std::min<int64_t>(budget - n_gen, 1 << 20)));
    }
  } catch (const Cancelled&) {
    // The stop flag turned between the loop's look and the session's.
  } catch (const Error& e) {
    if (std::string(e.what()).find("finite logit") == std::string::npos) throw;
    throw Error(std::string(e.what()) + " at generated token " + std::to_string(n_gen) + ": " + model_path +
                " has broken weights or metadata");
  }
  if (prompt_s == 0) prompt_s = seconds_since(t0);
  if (stop_requested()) why = Stop::Signal;
  else if (why == Stop::Budget && n_gen >= room && (until_end || n_predict > room)) why = Stop::ContextFull;
  gen.finish();  // stopped early: the steps past the last token
  write_stdout(out.flush());
  if (isatty(STDOUT_FILENO)) write_stdout("\n");  // a pipe gets exactly the generated text
  const double gen_s = seconds_since(t0);
  std::string reason;
  switch (why) {
    case Stop::Budget: reason = "-n " + std::to_string(n_predict) + " reached"; break;
    case Stop::EndToken: reason = "end-of-generation token"; break;
    case Stop::ContextFull: reason = "context full (" + std::to_string(n_ctx) + " tokens; raise --ctx-size)"; break;
    case Stop::Signal: reason = std::string("interrupted (") + stop_signal_name() + ")"; break;
  }
  char loaded[64] = "";
  if (choice.load.bytes)
    std::snprintf(loaded, sizeof loaded, " (%.2f GB at %.1f GB/s)", double(choice.load.bytes) / 1e9,
                  double(choice.load.bytes) / 1e9 / std::max(choice.load.seconds, 1e-9));
  std::fprintf(stderr,
               "\nweir: load %.0f ms%s | first token after %.0f ms | prompt %zu tokens, %.1f t/s | generation %d tokens, "
               "%.1f t/s | stopped: %s\n",
               load_s * 1e3, loaded, first_token_s * 1e3, ids.size(), double(ids.size()) / prompt_s, n_gen, gen_s > 0 ? double(n_gen) / gen_s : 0.0,
               reason.c_str());
  if (specs.proposer) {
    const SpecStats& st = gen.stats();
    std::fprintf(stderr, "weir: speculative (%s): %.2f tokens a step, %lld of %lld guesses kept (%.0f%%), %lld of %lld steps checked guesses\n",
                 specs.describe().c_str(), st.tokens_per_step(), static_cast<long long>(st.accepted),
                 static_cast<long long>(st.drafted), 100 * st.acceptance(), static_cast<long long>(st.spec_steps),
                 static_cast<long long>(st.steps));
    if (verbose) {
      const DraftLength& dl = gen.draft_length();
      std::string costs;
      for (int k = 0; k <= std::min(dl.options().draft_max, 8); ++k) costs += " " + std::to_string(dl.step_cost(k) * 1e3).substr(0, 6);
      std::fprintf(stderr, "weir: draft length now %d: acceptance %.2f; step ms for k = 0..%d:%s\n", dl.next(),
                   dl.acceptance(), std::min(dl.options().draft_max, 8), costs.c_str());
    }
  }
  return why == Stop::Signal ? stop_exit_code() : 0;
}

}  // namespace weir::tools
