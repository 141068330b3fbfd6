// weir imatrix: an importance matrix from a text file, as llama-imatrix
// makes one. The text is tokenized whole (with BOS) and run in chunks of -c
// tokens (the first token of each replaced by BOS, the KV cache cleared
// between chunks), every token's logits computed; the inputs of every
// layer's matrix products are summed as squares per column
// (engine/imatrix_collector.h) and written in llama.cpp's GGUF imatrix
// format (core/imatrix_file.h). Progress: a line a chunk with the running
// perplexity of the chunks' second halves, as llama-imatrix prints it.
// The CPU only: the collector reads the products' inputs in host memory.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "core/file_checks.h"
#include "core/imatrix_file.h"
#include "engine/imatrix_collector.h"
#include "engine/session.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/common.h"
#include "tools/runtime_flags.h"

namespace weir::tools {

int cmd_imatrix(int argc, char** argv) {
  std::string model_path, file, out_path = "imatrix.gguf";
  int max_chunks = -1;
  RuntimeFlags rf;
  RuntimeFlags::Defaults d;
  d.n_ctx = 512;
  d.ctx_help = "chunk length in tokens (default 512)";
  d.n_ctx_at_most_trained = false;
  Args a("imatrix",
         "Compute an importance matrix from a text file (llama-imatrix's GGUF format) for weir quantize --imatrix.");
  a.opt("-m,--model", &model_path, "FILE", "GGUF model (required)")
      .opt("-f,--file", &file, "FILE", "text file to run (required)")
      .opt("-o,--output", &out_path, "FILE", "importance matrix to write (default imatrix.gguf)")
      .opt("--chunks", &max_chunks, "N", "run at most N chunks (default: all)");
  rf.add_to(a, d);
  if (!a.parse(argc, argv)) return 0;
  rf.parsed(a);
  RuntimeSpec spec = rf.spec(model_path);
  if (spec.n_gpu_layers != 0 || spec.fit || spec.tp > 1)
    throw UsageError("weir imatrix runs on the CPU only (no -ngl, --fit or --tp)");
  const int64_t n_ctx = spec.n_ctx;
  if (file.empty()) throw UsageError("no text file given (-f FILE)");
  if (n_ctx < 4 || n_ctx > (int64_t(1) << 24))
    throw UsageError("--ctx-size: expected 4 to 16777216 tokens a chunk, got " + std::to_string(n_ctx));
  if (max_chunks < -1 || max_chunks == 0)
    throw UsageError("--chunks: expected a positive number of chunks (-1: all), got " + std::to_string(max_chunks));
  const std::string text = read_text_file(file, "-f");
  check_output_path(out_path);  // before the run, not after it

  // The session is made here, with the collector's hooks.
  SessionParams sp;
  sp.n_ctx = n_ctx;
  sp.n_batch = step_tokens(spec);
  sp.kv_type = spec.kv_type;
  sp.stop = spec.stop;
  ImatrixCollector collector;
  collector.attach(sp);
  spec.n_ctx = 0;
  Runtime rt = build_runtime(spec);
  refuse_embeddings_only(*rt.model, "imatrix");
  Session session(*rt.model, *rt.backends.backend, sp);

  const Model* model = rt.model.get();
  const Vocab& vocab = model->tokenizer().vocab();
  const bool add_bos = vocab.add_bos;
  const std::vector<int32_t> tokens = model->tokenizer().encode(text, add_bos, true);
  int64_t n_chunk = int64_t(tokens.size()) / n_ctx;
  if (max_chunks >= 0) n_chunk = std::min<int64_t>(n_chunk, max_chunks);
  if (n_chunk == 0)
    throw Error(file + ": " + std::to_string(tokens.size()) + " tokens is fewer than one chunk of " +
                std::to_string(n_ctx) + " (--ctx-size)");
  std::fprintf(stderr, "weir imatrix: %zu tokens, %lld chunks of %lld, loaded in %.0f ms\n", tokens.size(),
               (long long)n_chunk, (long long)n_ctx, (rt.model_seconds + rt.backends.load.seconds) * 1e3);
  std::vector<int32_t> every_row(static_cast<size_t>(n_ctx));
  for (int64_t j = 0; j < n_ctx; ++j) every_row[size_t(j)] = int32_t(j);

  double sum = 0;
  int64_t count = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t c = 0; c < n_chunk; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
    if (add_bos) chunk[0] = vocab.bos;
    session.reset();
    session.eval(chunk, every_row);
    for (int64_t j = n_ctx / 2; j < n_ctx - 1; ++j) {
      sum += token_nll(session.logits(size_t(j)), session.n_vocab(), chunk[size_t(j) + 1]);
      ++count;
    }
    const double s = seconds_since(t0);
    std::fprintf(stderr, "weir imatrix: chunk %lld/%lld  PPL %.4f  %.1f s  (~%.0f s left)\n", (long long)(c + 1),
                 (long long)n_chunk, std::exp(sum / double(count)), s, s / double(c + 1) * double(n_chunk - c - 1));
  }

  Imatrix m = collector.result();
  if (m.entries.empty()) throw Error(model_path + ": no layer matrix products were seen (nothing to write)");
  m.datasets = {file};
  m.chunk_size = uint32_t(n_ctx);
  m.chunk_count = uint32_t(collector.max_count() / n_ctx);
  write_imatrix(out_path, m);
  std::printf("%s: %zu entries from %lld chunks of %lld tokens (%s)\n", out_path.c_str(), m.entries.size(),
              (long long)n_chunk, (long long)n_ctx, file.c_str());
  return 0;
}

}  // namespace weir::tools
