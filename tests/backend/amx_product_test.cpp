// The AMX prefill product (backend/cpu/amx_product.h). Everywhere: the
// layouts, through the plain panel product, against a float64 product of the
// dequantized weights and the bf16-rounded activations. Where AMX is usable
// (the GPU hosts' Xeons; skipped elsewhere): the tile kernel against the
// plain product, and whole products of every weight type at odd row and
// token counts against float64.
#include "backend/cpu/amx_product.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/amx.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/quant/random_blocks.h"

namespace weir::cpu {
namespace {

struct Problem {
  DType type;
  int64_t N, K, T;
  std::vector<uint8_t> w;
  size_t wstride = 0;
  std::vector<float> x;          // T x K
  std::vector<uint16_t> packed;  // amx layout
};

Problem make(DType t, int64_t N, int64_t K, int64_t T, uint64_t seed) {
  Problem p{t, N, K, T, {}, 0, {}, {}};
  p.wstride = row_bytes(t, K) + 4;  // rows a stride apart
  p.w.assign(p.wstride * size_t(N), 0);
  for (int64_t r = 0; r < N; ++r) quant::random_fill(t, p.w.data() + size_t(r) * p.wstride, K, 0.0f, 0.05f, seed + r);
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  p.x.resize(size_t(T * K));
  for (float& v : p.x) v = nd(rng);
  p.packed.assign(amx_packed_bytes(T, K) / sizeof(uint16_t), 0);
  for (int64_t j = 0; j < T; ++j) amx_pack_token(p.x.data() + j * K, K, j, p.packed.data());
  return p;
}

// y[t][n] in float64 from the dequantized weights and bf16-rounded x, and
// the sum of |products| (for the tolerance).
void want(const Problem& p, std::vector<double>* y, std::vector<double>* mag) {
  y->assign(size_t(p.T * p.N), 0.0);
  mag->assign(size_t(p.T * p.N), 0.0);
  std::vector<float> wf(size_t(p.K));
  for (int64_t n = 0; n < p.N; ++n) {
    dequantize_row(p.type, p.w.data() + size_t(n) * p.wstride, wf.data(), p.K);
    for (int64_t t = 0; t < p.T; ++t) {
      double s = 0, m = 0;
      for (int64_t k = 0; k < p.K; ++k) {
        const double v = double(wf[size_t(k)]) * double(bf16_to_f32(f32_to_bf16(p.x[size_t(t * p.K + k)])));
        s += v;
        m += std::fabs(v);
      }
      (*y)[size_t(t * p.N + n)] = s;
      (*mag)[size_t(t * p.N + n)] = m;
    }
  }
}

// bf16 weights: each within 2^-9 of its value, so a product within about
// 2^-9 of the sum of |products| (and much less on average).
void expect_close(const Problem& p, const std::vector<float>& got, size_t ldy) {
  std::vector<double> y, mag;
  want(p, &y, &mag);
  for (int64_t t = 0; t < p.T; ++t)
    for (int64_t n = 0; n < p.N; ++n)
      ASSERT_NEAR(double(got[size_t(t) * ldy + size_t(n)]), y[size_t(t * p.N + n)],
                  4e-3 * mag[size_t(t * p.N + n)] + 1e-6)
          << dtype_name(p.type) << " token " << t << " row " << n;
}

TEST(AmxProduct, LayoutsAndBlockingGiveTheProductThroughThePlainKernel) {
  // Several panel groups (N 45: a panel and a part; 300: three groups and a
  // part), K blocks (768 in blocks of 256), tokens padded (37), and the rows
  // split between two callers as two threads would take them.
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::F16}) {
    for (int64_t N : {45, 300}) {
      const Problem p = make(t, N, 768, 37, 5);
      const size_t ldy = size_t(p.N) + 3;
      std::vector<float> got(size_t(p.T) * ldy, -1.0f);
      const int64_t cut = N > 64 ? 160 : 32;
      amx_product_rows(t, p.w.data(), p.wstride, p.N, p.K, p.packed.data(), p.T, got.data(), ldy, 0, cut, false, 256);
      amx_product_rows(t, p.w.data(), p.wstride, p.N, p.K, p.packed.data(), p.T, got.data(), ldy, cut, p.N, false,
                       256);
      expect_close(p, got, ldy);
    }
  }
}

TEST(AmxProduct, PanelHoldsTheRoundedWeights) {
  const Problem p = make(DType::Q4_K, 3, 512, 1, 9);
  std::vector<uint16_t> panel(size_t(kAmxPanelRows * 256));
  amx_build_panel(p.type, p.w.data(), p.wstride, 3, 256, 256, panel.data());  // the second half of K
  std::vector<float> wf(size_t(p.K));
  for (int64_t r = 0; r < kAmxPanelRows; ++r) {
    if (r >= 3) {
      for (int64_t k = 0; k < 256; ++k) ASSERT_EQ(panel[size_t(amx_panel_index(r, k))], 0) << "padding row " << r;
      continue;
    }
    dequantize_row(p.type, p.w.data() + size_t(r) * p.wstride, wf.data(), p.K);
    for (int64_t k = 0; k < 256; ++k)
      if (std::fabs(wf[size_t(256 + k)]) > 1e-30f) {
        ASSERT_EQ(panel[size_t(amx_panel_index(r, k))], f32_to_bf16(wf[size_t(256 + k)]));
      }
  }
}

bool amx_here() { return amx_support().usable() && amx_support().bf16; }

TEST(AmxProduct, TileKernelEqualsThePlainKernel) {
  if (!amx_here()) GTEST_SKIP() << "AMX: " << amx_support().describe();
  for (int64_t T : {1, 16, 31, 32, 70}) {
    const Problem p = make(DType::Q4_0, 64, 1024, T, 11);
    std::vector<uint16_t> pa(size_t(kAmxPanelRows * 512)), pb(pa.size());
    std::vector<float> ca(2 * amx_accumulator_floats(T), -1.0f), cb(ca.size(), -2.0f);
    const uint16_t* panels[2] = {pa.data(), pb.data()};
    float* a[2] = {ca.data(), ca.data() + amx_accumulator_floats(T)};
    float* b[2] = {cb.data(), cb.data() + amx_accumulator_floats(T)};
    // Two K blocks: zeroed, then accumulated.
    for (int64_t k0 : {0, 512}) {
      amx_build_panel(p.type, p.w.data(), p.wstride, 32, k0, 512, pa.data());
      amx_build_panel(p.type, p.w.data() + 32 * p.wstride, p.wstride, 32, k0, 512, pb.data());
      amx_accumulate_reference(panels, 2, 512, p.packed.data(), p.K / 32, k0 / 32, T, a, k0 == 0);
      amx_accumulate(panels, 2, 512, p.packed.data(), p.K / 32, k0 / 32, T, b, k0 == 0);
    }
    std::vector<float> ya(size_t(T * 64)), yb(ya.size());
    for (int q = 0; q < 2; ++q) {
      amx_store_result(a[q], T, 32, ya.data() + 32 * q, 64);
      amx_store_result(b[q], T, 32, yb.data() + 32 * q, 64);
    }
    std::vector<double> y, mag;
    want(p, &y, &mag);
    for (size_t i = 0; i < ya.size(); ++i) ASSERT_NEAR(ya[i], yb[i], 1e-5 * mag[i] + 1e-6) << "T " << T << " at " << i;
  }
}

TEST(AmxProduct, EveryWeightTypeAgainstFloat64) {
  if (!amx_here()) GTEST_SKIP() << "AMX: " << amx_support().describe();
  for (DType t : {DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::F16, DType::BF16}) {
    if (!quant::can_randomize(t)) continue;
    const Problem p = make(t, 170, 2560, 45, 21);  // two K blocks of the default size
    const size_t ldy = size_t(p.N);
    std::vector<float> got(size_t(p.T) * ldy, -1.0f);
    amx_product_rows(t, p.w.data(), p.wstride, p.N, p.K, p.packed.data(), p.T, got.data(), ldy, 0, 32);
    amx_product_rows(t, p.w.data(), p.wstride, p.N, p.K, p.packed.data(), p.T, got.data(), ldy, 32, p.N);
    expect_close(p, got, ldy);
  }
}

}  // namespace
}  // namespace weir::cpu
