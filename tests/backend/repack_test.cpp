// The CPU backend's repacked weight layout (backend/cpu/repack.h): every
// kernel equals the plain reference bit for bit on random rows (odd sizes,
// every token count of a tile, several groups, rows apart by a stride), the
// reference equals a float64 product of the same quantized values to float
// rounding, and the file-layout kernels (qdot.h) agree with it to float
// rounding (their float order differs).
#include "backend/cpu/repack.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/qdot.h"
#include "core/dtype.h"
#include "core/quant/random_blocks.h"

namespace weir::cpu {
namespace {

struct Case {
  int64_t K;
  int groups, nr;
};

struct Data {
  std::vector<uint8_t> w, packed, act;
  size_t wstride = 0, astride = 0, gb = 0;
};

Data make(DType t, const Case& c, uint64_t seed) {
  Data d;
  const int64_t N = int64_t(c.groups) * kRepackRows;
  d.wstride = row_bytes(t, c.K) + 6;  // rows a stride apart, not packed
  d.w.assign(d.wstride * size_t(N), 0xAB);
  for (int64_t r = 0; r < N; ++r) quant::random_fill(t, d.w.data() + size_t(r) * d.wstride, c.K, 0.0f, 0.02f, seed + r);
  d.gb = repacked_group_bytes(t, c.K);
  d.packed.assign(d.gb * size_t(c.groups), 0);
  repack_groups(t, d.w.data(), d.wstride, c.K, N, 0, c.groups, d.packed.data());
  std::mt19937 rng{static_cast<unsigned>(seed)};
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const DType at = activation_type(t);
  d.astride = row_bytes(at, c.K) + 2;
  d.act.assign(d.astride * size_t(c.nr), 0);
  std::vector<float> x(static_cast<size_t>(c.K));
  for (int j = 0; j < c.nr; ++j) {
    for (float& v : x) v = nd(rng);
    if (j == 1) x[0] = 250.0f;  // an outlier: a coarse block scale
    quantize_act(at, x.data(), d.act.data() + size_t(j) * d.astride, c.K, SimdLevel::Reference);
  }
  return d;
}

const Case kCases[] = {{32, 1, 1}, {64, 2, 3}, {96, 1, 8}, {4128, 3, 5}, {1024, 5, 7}, {2048, 2, 2}, {160, 4, 4}};

TEST(Repack, EveryKernelEqualsTheReferenceBitForBit) {
  for (const Case& c : kCases) {
    SCOPED_TRACE("K " + std::to_string(c.K) + " groups " + std::to_string(c.groups) + " tokens " + std::to_string(c.nr));
    const Data d = make(DType::Q4_0, c, 17 + uint64_t(c.K));
    const size_t ldy = size_t(c.groups) * kRepackRows + 3;
    std::vector<float> want(ldy * size_t(c.nr), -1.0f);
    repacked_tile_reference(DType::Q4_0, c.K, d.packed.data(), d.gb, c.groups, d.act.data(), d.astride, c.nr, want.data(), ldy);
    for (SimdLevel l : {SimdLevel::Reference, SimdLevel::AVX2, SimdLevel::AVX512, SimdLevel::AVX512_VNNI}) {
      if (int(l) > int(hardware_simd_level())) continue;
      std::vector<float> got(want.size(), -1.0f);
      repacked_tile(DType::Q4_0, l)(c.K, d.packed.data(), d.gb, c.groups, d.act.data(), d.astride, c.nr, got.data(), ldy);
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
            << simd_level_name(l) << " element " << i << ": " << got[i] << " vs " << want[i];
    }
  }
}

TEST(Repack, ReferenceEqualsAFloat64ProductAndTheFileLayoutKernels) {
  for (const Case& c : kCases) {
    SCOPED_TRACE("K " + std::to_string(c.K));
    const Data d = make(DType::Q4_0, c, 99 + uint64_t(c.K));
    const int64_t N = int64_t(c.groups) * kRepackRows;
    const size_t ldy = size_t(N);
    std::vector<float> got(ldy * size_t(c.nr));
    repacked_tile_reference(DType::Q4_0, c.K, d.packed.data(), d.gb, c.groups, d.act.data(), d.astride, c.nr, got.data(), ldy);
    std::vector<float> wf(static_cast<size_t>(c.K)), af(static_cast<size_t>(c.K));
    const QDotKernels file = qdot_kernels(DType::Q4_0);
    for (int j = 0; j < c.nr; ++j) {
      dequantize_row(DType::Q8_0, d.act.data() + size_t(j) * d.astride, af.data(), c.K);
      for (int64_t r = 0; r < N; ++r) {
        dequantize_row(DType::Q4_0, d.w.data() + size_t(r) * d.wstride, wf.data(), c.K);
        double s = 0, mag = 0;
        for (int64_t i = 0; i < c.K; ++i) {
          s += double(wf[size_t(i)]) * double(af[size_t(i)]);
          mag += std::fabs(double(wf[size_t(i)]) * double(af[size_t(i)]));
        }
        const float v = got[size_t(j) * ldy + size_t(r)];
        ASSERT_NEAR(double(v), s, 1e-6 * mag + 1e-30) << "row " << r << " token " << j;
        const float f = file.dot(c.K, d.w.data() + size_t(r) * d.wstride, d.act.data() + size_t(j) * d.astride);
        ASSERT_NEAR(double(f), double(v), 2e-6 * mag + 1e-30) << "row " << r << " token " << j;
      }
    }
  }
}

TEST(Repack, OnlyTypesWithALayout) {
  EXPECT_TRUE(can_repack(DType::Q4_0, 64));
  EXPECT_FALSE(can_repack(DType::Q4_0, 48));
  EXPECT_FALSE(can_repack(DType::F16, 64));
  EXPECT_EQ(repacked_tile(DType::Q6_K), nullptr);
  EXPECT_EQ(repacked_group_bytes(DType::Q4_0, 64), 2u * 144u);
}

}  // namespace
}  // namespace weir::cpu
