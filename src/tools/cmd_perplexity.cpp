// weir perplexity: scores a text the way llama-perplexity does. The text is
// tokenized whole (with BOS); chunk i is tokens[n_ctx*i, n_ctx*(i+1)) with its
// first token replaced by BOS; the KV cache is cleared between chunks; only
// the second half of each chunk is scored: the logits at positions
// n_ctx/2 .. n_ctx-2 predict the tokens after them.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "engine/session.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/common.h"
#include "tools/runtime_flags.h"

namespace weir::tools {

int cmd_perplexity(int argc, char** argv) {
  std::string model_path, file;
  int max_chunks = -1;
  RuntimeFlags rf;
  RuntimeFlags::Defaults d;
  d.n_ctx = 512;
  d.ctx_help = "chunk length in tokens (default 512)";
  d.n_ctx_at_most_trained = false;
  Args a("perplexity", "Score a text file; prints running PPL per chunk, then 'PPL = value +/- stderr'.");
  a.opt("-m,--model", &model_path, "FILE", "GGUF model (required)")
      .opt("-f,--file", &file, "FILE", "text file to score (required)")
      .opt("--chunks", &max_chunks, "N", "score at most N chunks (default: all)");
  rf.add_to(a, d);
  if (!a.parse(argc, argv)) return 0;
  rf.parsed(a);
  const RuntimeSpec spec = rf.spec(model_path);
  const int64_t n_ctx = spec.n_ctx;
  if (file.empty()) throw UsageError("no text file given (-f FILE)");
  if (n_ctx < 4 || n_ctx > (int64_t(1) << 24))
    throw UsageError("--ctx-size: expected 4 to 16777216 tokens a chunk, got " + std::to_string(n_ctx));
  if (max_chunks < -1 || max_chunks == 0)
    throw UsageError("--chunks: expected a positive number of chunks (-1: all), got " + std::to_string(max_chunks));
  const std::string text = read_text_file(file, "-f");

  Runtime rt = build_runtime(spec);
  refuse_embeddings_only(*rt.model, "perplexity");
  const Model* model = rt.model.get();
  const Vocab& vocab = model->tokenizer().vocab();
  const bool add_bos = vocab.add_bos;
  const std::vector<int32_t> tokens = model->tokenizer().encode(text, add_bos, true);
  int64_t n_chunk = int64_t(tokens.size()) / n_ctx;
  if (max_chunks >= 0) n_chunk = std::min<int64_t>(n_chunk, max_chunks);
  if (n_chunk == 0)
    throw Error(file + ": " + std::to_string(tokens.size()) + " tokens is fewer than one chunk of " +
                std::to_string(n_ctx) + " (--ctx-size)");
  std::fprintf(stderr, "weir perplexity: %zu tokens, %lld chunks of %lld, loaded in %.0f ms\n", tokens.size(),
               (long long)n_chunk, (long long)n_ctx, (rt.model_seconds + rt.backends.load.seconds) * 1e3);
  Backend& backend = *rt.backends.backend;
  Session& session = *rt.session;
  const int64_t first = n_ctx / 2;
  std::vector<int32_t> want;
  for (int64_t j = first; j < n_ctx - 1; ++j) want.push_back(int32_t(j));

  double sum = 0, sum2 = 0;
  int64_t count = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t c = 0; c < n_chunk; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
    if (add_bos) chunk[0] = vocab.bos;
    session.reset();
    session.eval(chunk, want);
    for (size_t i = 0; i < want.size(); ++i) {
      const int64_t bad = first_non_finite(session.logits(i), session.n_vocab());
      if (bad >= 0)
        throw Error("chunk " + std::to_string(c + 1) + ", token " + std::to_string(want[i]) +
                    ": the model computed a non-finite logit (" + std::to_string(session.logits(i)[bad]) +
                    " for token " + std::to_string(bad) + "); " + model_path + " has broken weights or metadata");
      const double v = token_nll(session.logits(i), session.n_vocab(), chunk[size_t(want[i]) + 1]);
      sum += v;
      sum2 += v * v;
      ++count;
    }
    if (c == 0) {
      std::fprintf(stderr, "weir perplexity: %.2f s per chunk, ~%.0f s in all\n", seconds_since(t0),
                   seconds_since(t0) * double(n_chunk));
      report_numa(backend);
    }
    char progress[64];
    std::snprintf(progress, sizeof progress, "[%lld]%.4f,", (long long)(c + 1), std::exp(sum / double(count)));
    write_stdout(progress);
  }
  const double mean = sum / double(count);
  const double var = sum2 / double(count) - mean * mean;
  const double ppl = std::exp(mean);
  const double err = var > 0 && count > 1 ? std::sqrt(var / double(count - 1)) * ppl : 0.0;
  if (!std::isfinite(ppl))
    throw Error("the perplexity is not finite (" + std::to_string(ppl) + "): the mean negative log-likelihood is " +
                std::to_string(mean));
  write_stdout("\n");
  std::fprintf(stderr, "weir perplexity: %lld tokens scored in %.1f s (%.1f t/s evaluated)\n", (long long)count,
               seconds_since(t0), double(n_chunk * n_ctx) / seconds_since(t0));
  std::printf("PPL = %.4f +/- %.5f\n", ppl, err);
  return 0;
}

}  // namespace weir::tools
