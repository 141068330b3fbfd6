// K-quant quantizers against llama.cpp-made blocks of the real Gemma 3 270M
// Q4_K_M file (made by llama-quantize).
//
// Q4_K and Q6_K: for each llama.cpp block, y = dequant(block) and a plausible
// original x = y + u, u uniform within +-half a quantization step of its
// sub-block (d * sc). llama.cpp's block then represents x with a known
// error E_llama = rms(x - y); our quantizer, given x, must do at least as
// well: rms(x - dequant(ours(x))) <= E_llama, with no tolerance.
//
// Q2_K, Q3_K, Q5_K (the file has none): x = dequant of the file's Q6_K and
// Q8_0 tensors (close to the originals); the errors of all types on the same
// x must be strictly ordered Q2_K > Q3_K > Q4_K > Q5_K > Q6_K > Q8_0, and
// each must be within a bound derived from llama.cpp's own Q4_K error above
// (llama.cpp's Q4_K error times 2 per bit less, / 2 per bit more).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/gguf.h"
#include "core/half.h"
#include "core/quant/block_formats.h"
#include "core/quant/quantize.h"
#include "quant_test_util.h"
#include "test_env.h"

namespace weir {
namespace {

// Step of sub-block j (of 16 or 32 elements) in a llama.cpp block.
float sub_step(DType t, const uint8_t* block, int j) {
  if (t == DType::Q4_K) {
    const auto b = quant::load_block<quant::BlockQ4_K>(block, 0);
    uint8_t sc, mn;
    quant::unpack_scale_min_k4(j, b.scales, &sc, &mn);
    return fp16_to_f32(b.d) * float(sc);
  }
  const auto b = quant::load_block<quant::BlockQ6_K>(block, 0);
  return std::fabs(fp16_to_f32(b.d) * float(b.scales[j]));
}

struct Comparison {
  int64_t n = 0;
  double sq_llama = 0, sq_ours = 0, sq_x = 0;
};

// x = dequant(llama block) + u for every super-block of every tensor of
// type t; adds the squared errors of llama.cpp's blocks and ours.
Comparison compare_with_llama(const GGUFFile& f, DType t) {
  Comparison c;
  const int sub_len = t == DType::Q4_K ? 32 : 16;
  test::Rng rng(uint64_t(t) * 1000 + 17);
  for (const GGUFTensorInfo& ti : f.tensors()) {
    if (ti.dtype != t) continue;
    const int64_t n = ti.n_elements(), nb = n / quant::kQK_K;
    const size_t bs = traits(t).type_size;
    std::vector<float> y(n), x(n);
    dequantize_row(t, ti.data, y.data(), n);
    for (int64_t b = 0; b < nb; ++b) {
      for (int i = 0; i < quant::kQK_K; ++i) {
        const float step = sub_step(t, ti.data + b * bs, i / sub_len);
        const int64_t k = b * quant::kQK_K + i;
        x[k] = y[k] + float((rng.uniform() - 0.5) * step);
      }
    }
    const std::vector<float> ours = test::round_trip(t, x, ti.ne[0]);
    c.n += n;
    c.sq_llama += test::sum_sq_diff(x, y);
    c.sq_ours += test::sum_sq_diff(x, ours);
    c.sq_x += test::sum_sq_diff(x, std::vector<float>(n, 0.0f));
  }
  return c;
}

TEST(QuantizeModel, Q4_KAndQ6_KNoWorseThanLlamaCpp) {
  WEIR_REQUIRE_MODEL(path);
  const GGUFFile f = GGUFFile::open(path);
  std::printf("  type  elements   rms(x)      E_llama     E_ours      ours/llama\n");
  for (DType t : {DType::Q4_K, DType::Q6_K}) {
    const Comparison c = compare_with_llama(f, t);
    ASSERT_GT(c.n, 0) << "model has no " << dtype_name(t) << " tensor";
    const double el = std::sqrt(c.sq_llama / c.n), eo = std::sqrt(c.sq_ours / c.n);
    std::printf("  %-5s %-10lld %.4e  %.4e  %.4e  %.4f\n", dtype_name(t), (long long)c.n,
                std::sqrt(c.sq_x / c.n), el, eo, eo / el);
    EXPECT_LE(eo, el) << dtype_name(t);
  }
}

// Each extra bit halves the quantization step, so a quantizer as good as
// llama.cpp's Q4_K one reaches its error times 2^-(bits more than Q4_K).
constexpr double kBitFactor = 2.0;

TEST(QuantizeModel, AllKTypesOnNearOriginalWeights) {
  WEIR_REQUIRE_MODEL(path);
  const GGUFFile f = GGUFFile::open(path);
  // Near-originals: Q6_K ffn_down tensors and Q8_0 attn_v tensors,
  // dequantized; rows regrouped to 256 so every K type applies.
  std::vector<float> x;
  for (const GGUFTensorInfo& ti : f.tensors()) {
    const std::string name(ti.name);
    const bool q6 = ti.dtype == DType::Q6_K && name.find("ffn_down") != std::string::npos;
    const bool q8 = ti.dtype == DType::Q8_0 && name.find("attn_v") != std::string::npos;
    if (!q6 && !q8) continue;
    const size_t off = x.size();
    x.resize(off + ti.n_elements());
    dequantize_row(ti.dtype, ti.data, x.data() + off, ti.n_elements());
  }
  ASSERT_GT(x.size(), 0u);
  ASSERT_EQ(x.size() % 256, 0u);

  // llama.cpp's own Q4_K relative error on the file's Q4_K tensors, as in
  // the test above: the anchor of the bounds.
  const Comparison c4 = compare_with_llama(f, DType::Q4_K);
  const double llama_q4_rel = std::sqrt(c4.sq_llama / c4.sq_x);

  const struct { DType t; double bits_from_q4; } types[] = {
      {DType::Q2_K, -2}, {DType::Q3_K, -1}, {DType::Q4_K, 0}, {DType::Q5_K, 1}, {DType::Q6_K, 2}, {DType::Q8_0, 4}};
  const double rx = test::rms(x);
  std::printf("  %zu elements, rms %.4e; llama.cpp Q4_K relative error %.4f\n", x.size(), rx, llama_q4_rel);
  double prev = INFINITY;
  for (const auto& e : types) {
    const double rel = test::rms_diff(x, test::round_trip(e.t, x, 256)) / rx;
    const double bound = llama_q4_rel * std::pow(kBitFactor, -e.bits_from_q4);
    std::printf("  %-5s relative rms error %.5f (bound %.5f)\n", dtype_name(e.t), rel, bound);
    EXPECT_LT(rel, prev) << dtype_name(e.t) << " is not better than the type with one bit less";
    if (e.t != DType::Q4_K && e.t != DType::Q8_0) {
      EXPECT_LE(rel, bound) << dtype_name(e.t);
    }
    prev = rel;
  }
}

}  // namespace
}  // namespace weir
