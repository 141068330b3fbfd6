// Micro-benchmarks of reading a model file's tokenizer: the GGUF header
// parse, Vocab::from_gguf and Tokenizer::from_gguf, and encoding
// ppl-text.txt (../shared/ref), on the files the tests use: Gemma 3 270M
// (SentencePiece, 262,144 tokens) and the qwen2 vocabulary of the
// reference data (BPE, 152,064 tokens and 151,387 merges); a file not there
// skips. Wall time, the best of 5 after a warm-up (page cache, first-use
// statics); printed, not asserted. The tests check what these make:
// tests/core/gguf_reader_test.cpp, tests/text/spm_tokenizer_test.cpp and
// bpe_tokenizer_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>

#include "core/gguf.h"
#include "json_lite.h"
#include "test_env.h"
#include "text/tokenizer.h"
#include "text/vocab.h"

namespace weir {
namespace {

// The best wall time of f over 5 runs after one to warm up, in ms.
double best_ms(const std::function<void()>& f) {
  f();
  double best = 1e300;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

void tokenizer_times(const std::string& name, const std::string& path, bool special) {
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "not found: " << path;
  const GGUFFile f = GGUFFile::open(path);
  const double vocab = best_ms([&] { Vocab v = Vocab::from_gguf(f); });
  const double build = best_ms([&] { auto t = Tokenizer::from_gguf(f); });
  const auto tok = Tokenizer::from_gguf(f);
  const std::string text_path = test::ref_dir() + "/ppl-text.txt";
  if (!std::filesystem::exists(text_path)) GTEST_SKIP() << "not found: " << text_path;
  const std::string text = test::json::read_file(text_path);
  size_t n = 0;
  const double encode = best_ms([&] { n = tok->encode(text, special, special).size(); });
  std::printf("%s: Vocab::from_gguf %.1f ms, Tokenizer::from_gguf %.1f ms; encode ppl-text.txt (%zu bytes, %zu "
              "tokens) %.1f ms\n",
              name.c_str(), vocab, build, text.size(), n, encode);
}

TEST(Tokenizers, SpmBuildAndEncode) { tokenizer_times("gemma3 (spm)", test::model_path(), true); }

TEST(Tokenizers, BpeBuildAndEncode) {
  tokenizer_times("qwen2 (bpe)", test::ref_dir() + "/qwen2-vocab-deepseek-r1.gguf", false);
}

TEST(GGUF, ParseGemma3Header) {
  const std::string path = test::model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "not found: " << path;
  size_t kvs = 0, tensors = 0;
  const double ms = best_ms([&] {
    const GGUFFile f = GGUFFile::open(path);
    kvs = f.kvs().size(), tensors = f.tensors().size();
  });
  std::printf("parsed %s (%zu kvs, %zu tensors) in %.2f ms\n", path.c_str(), kvs, tensors, ms);
}

}  // namespace
}  // namespace weir
