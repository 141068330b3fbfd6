// Every architecture against the independent float64 numpy forward
// (tests/reference/reference_forward.py) on tiny random-weight models that
// tests/reference/tiny_models.py writes at test time. Logits of all 20 prompt
// positions are compared three ways: the prompt as one batch, in batches of
// 6, and 15 tokens then 5 single-token decode steps (the KV cache path).
// Error of a row: max_i |weir_i - ref_i| / max_i |ref_i|; every row must be
// under 1e-4. The quantized models also run with llama.cpp rounding on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "engine/session.h"
#include "json_lite.h"
#include "model/model.h"
#include "tiny_models.h"
#include "logit_compare.h"

namespace weir {
namespace {

using test::row_rel_error;

struct Case {
  const char* name;
  bool llama_rounding;  // false: exact float path; true: llama.cpp's activation rounding
};
constexpr double kTol = 1e-4;

class ArchFloat64 : public ::testing::TestWithParam<Case> {};

TEST_P(ArchFloat64, LogitsMatchNumpyReference) {
  const Case c = GetParam();
  WEIR_TINY_MODEL(dir, c.name, c.llama_rounding ? "rounded" : "exact");
  const auto ref = test::json::parse(test::json::read_file(dir + "/" + c.name + ".json"));
  const std::vector<int32_t> ids = ref["ids"].as_int_vector<int32_t>();
  std::vector<std::vector<double>> want;
  const auto& rows = ref[c.llama_rounding ? "logits_rounded" : "logits"];
  for (size_t t = 0; t < rows.size(); ++t) want.push_back(rows[t].as_number_vector());
  ASSERT_EQ(want.size(), ids.size());

  auto model = Model::load(dir + "/" + c.name + ".gguf");
  ASSERT_EQ(model->hparams().n_vocab, int64_t(want[0].size()));
  CpuOptions opts;
  opts.llama_rounding = c.llama_rounding;
  CpuBackend backend(2, opts);
  const int32_t T = int32_t(ids.size());
  std::vector<int32_t> all(ids.size());
  std::iota(all.begin(), all.end(), 0);

  // The whole prompt, in batches of n_batch; logits of every position.
  auto prompt_error = [&](int64_t n_batch) {
    Session s(*model, backend, SessionParams{64, n_batch});
    s.eval(ids, all);
    double err = 0;
    for (int32_t t = 0; t < T; ++t) err = std::max(err, row_rel_error(s.logits(size_t(t)), want[size_t(t)]));
    return err;
  };
  const double err_batch = prompt_error(512), err_split = prompt_error(6);
  // 15 tokens as a batch, then one token at a time through the KV cache.
  const int32_t n_first = T - 5;
  Session s(*model, backend, SessionParams{64, 512});
  std::vector<int32_t> first(all.begin(), all.begin() + n_first);
  s.eval(std::span(ids).first(size_t(n_first)), first);
  double err_decode = 0;
  for (int32_t t = 0; t < n_first; ++t)
    err_decode = std::max(err_decode, row_rel_error(s.logits(size_t(t)), want[size_t(t)]));
  for (int32_t t = n_first; t < T; ++t) {
    s.eval(std::span(ids).subspan(size_t(t), 1));
    err_decode = std::max(err_decode, row_rel_error(s.logits(0), want[size_t(t)]));
  }
  std::printf("%s (%s): max relative logit error: batch %.3g, batches of 6 %.3g, decode %.3g\n", c.name,
              c.llama_rounding ? "llama.cpp rounding" : "exact", err_batch, err_split, err_decode);
  EXPECT_LT(err_batch, kTol);
  EXPECT_LT(err_split, kTol);
  EXPECT_LT(err_decode, kTol);
}

// The quantized models also run with llama.cpp's activation rounding (x
// rounded to Q8_0 blocks before each quantized product), against the numpy
// forward that rounds the same way (logits_rounded). Both differ from the
// unrounded float64 logits by about 0.037, from each other by < 1e-6 (a
// value landing on the other side of a rounding boundary would show as more,
// up to ~1e-4; the models and prompt are fixed, so this is deterministic).
INSTANTIATE_TEST_SUITE_P(Tiny, ArchFloat64,
                         ::testing::Values(Case{"llama3", false},
                                           Case{"llama-partial-linear", false},
                                           Case{"qwen2", false}, Case{"qwen3", false},
                                           Case{"gemma3", false}, Case{"llama3-q4_0", false},
                                           // gemma2: soft-capped scores and logits, every other layer a window
                                           Case{"gemma2", false}, Case{"gemma2-46-layers", false},
                                           Case{"qwen2-q8_0", false},
                                           Case{"llama3-q4_0", true},
                                           Case{"qwen2-q8_0", true},
                                           // phi3: fused q/k/v and gate/up, LongRoPE short and long
                                           Case{"phi3", false}, Case{"phi3-long", false},
                                           Case{"phi3-split", false},
                                           // Mixtures of experts
                                           Case{"qwen3moe", false}, Case{"mixtral", false},
                                           Case{"qwen3moe-q8_0", false},
                                           Case{"qwen3moe-q8_0", true}),
                         [](const auto& info) {
                           std::string n = std::string(info.param.name) +
                                           (info.param.llama_rounding ? "_rounded" : "_exact");
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace weir
