// K-quant integer dot kernels (qdot_k.h): the reference against a float dot
// of the independently dequantized rows, and every SIMD level this CPU has
// against the reference, bit for bit (they share one summation order).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/ops_dequant.h"
#include "backend/cpu/qdot_k.h"
#include "core/dtype.h"
#include "core/quant/block_formats.h"
#include "core/quant/quantize_blocks.h"
#include "core/quant/random_blocks.h"

namespace weir::cpu {
namespace {

constexpr DType kTypes[] = {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};
constexpr int kBlockCounts[] = {1, 3, 7, 13};
constexpr int64_t kQK = quant::kQK_K;

// Whether this CPU runs a level (our own check: qdot.cpp's dispatcher is
// another file).
bool cpu_has(SimdLevel l) {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  switch (l) {
    case SimdLevel::Reference: return true;
    case SimdLevel::AVX2: return avx2;
    case SimdLevel::AVX512: return avx512;
    case SimdLevel::AVX512_VNNI: return avx512 && __builtin_cpu_supports("avx512vnni");
  }
  return false;
}

const char* level_name(SimdLevel l) {
  switch (l) {
    case SimdLevel::Reference: return "reference";
    case SimdLevel::AVX2: return "avx2";
    case SimdLevel::AVX512: return "avx512";
    case SimdLevel::AVX512_VNNI: return "avx512_vnni";
  }
  return "?";
}

std::vector<uint8_t> random_weights(DType t, int64_t rows, int64_t n, uint64_t seed) {
  std::vector<uint8_t> w(row_bytes(t, n) * rows);
  quant::random_fill(t, w.data(), n * rows, 0.0f, 1.0f, seed);
  return w;
}

// Activations quantized to Q8_K from normal floats (with the odd outlier).
std::vector<uint8_t> random_acts(int64_t rows, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> x(n * rows);
  for (float& v : x) v = nd(rng);
  for (size_t i = 0; i < x.size(); i += 97) x[i] *= 20.0f;
  std::vector<uint8_t> a(rows * (n / kQK) * sizeof(quant::BlockQ8_K));
  quant::quantize_q8_K(x.data(), a.data(), rows * (n / kQK));
  return a;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(QDotK, KernelsExistForKTypesOnly) {
  for (DType t : kTypes)
    for (SimdLevel l : {SimdLevel::Reference, SimdLevel::AVX2, SimdLevel::AVX512, SimdLevel::AVX512_VNNI}) {
      const QDotKernels k = qdot_k_kernels(t, l);
      EXPECT_TRUE(k.dot && k.tile) << traits(t).name << " " << level_name(l);
    }
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::F32, DType::Q8_K})
    for (SimdLevel l : {SimdLevel::Reference, SimdLevel::AVX2, SimdLevel::AVX512, SimdLevel::AVX512_VNNI})
      EXPECT_FALSE(qdot_k_kernels(t, l)) << traits(t).name;
}

// The reference equals the float dot of the dequantized rows (computed in
// double) up to float rounding of the sums.
TEST(QDotK, ReferenceMatchesDequantizedDot) {
  for (DType t : kTypes) {
    const QDotKernels k = qdot_k_kernels(t, SimdLevel::Reference);
    for (int nb : kBlockCounts) {
      const int64_t n = nb * kQK;
      const auto w = random_weights(t, 1, n, 100 + nb);
      const auto a = random_acts(1, n, 200 + nb);
      std::vector<float> wf(n), af(n);
      dequantize_row(t, w.data(), wf.data(), n);
      dequantize_row(DType::Q8_K, a.data(), af.data(), n);
      double exact = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        exact += double(wf[i]) * af[i];
        mag += std::fabs(double(wf[i]) * af[i]);
      }
      const float got = k.dot(n, w.data(), a.data());
      EXPECT_NEAR(got, exact, 1e-5 * mag + 1e-30) << traits(t).name << " blocks " << nb;
    }
  }
}

class QDotKLevel : public ::testing::TestWithParam<SimdLevel> {
 protected:
  void SetUp() override {
    if (!cpu_has(GetParam()))
      GTEST_SKIP() << "this CPU lacks " << level_name(GetParam()) << "; its kernels are not run here";
  }
};

TEST_P(QDotKLevel, DotMatchesReferenceBitForBit) {
  for (DType t : kTypes) {
    const QDotKernels ref = qdot_k_kernels(t, SimdLevel::Reference);
    const QDotKernels k = qdot_k_kernels(t, GetParam());
    ASSERT_TRUE(k) << traits(t).name << " has no " << level_name(GetParam()) << " kernel";
    for (int nb : kBlockCounts) {
      const int64_t n = nb * kQK;
      for (int rep = 0; rep < 4; ++rep) {
        const auto w = random_weights(t, 1, n, 1000 * nb + rep);
        const auto a = random_acts(1, n, 3000 * nb + rep);
        const float want = ref.dot(n, w.data(), a.data());
        const float got = k.dot(n, w.data(), a.data());
        EXPECT_EQ(bits(got), bits(want)) << traits(t).name << " blocks " << nb << ": " << got << " vs " << want;
      }
    }
  }
}

// Every quant at its largest magnitude and activations at -128 / 127: no
// 16-bit intermediate may saturate.
TEST_P(QDotKLevel, ExtremeValuesDoNotSaturate) {
  for (DType t : kTypes) {
    const QDotKernels ref = qdot_k_kernels(t, SimdLevel::Reference);
    const QDotKernels k = qdot_k_kernels(t, GetParam());
    ASSERT_TRUE(k) << traits(t).name << " has no " << level_name(GetParam()) << " kernel";
    const int64_t n = 3 * kQK;
    for (int pattern = 0; pattern < 4; ++pattern) {
      // All bits set or all clear (with d and dmin set to 1.0 afterwards):
      // the top or bottom quant everywhere, the largest scales.
      auto w = random_weights(t, 1, n, 7);
      const size_t bs = traits(t).type_size;
      const uint8_t fill = pattern & 1 ? 0xFF : 0x00;
      for (size_t b = 0; b < w.size(); b += bs) {
        std::memset(&w[b], fill, bs);
        const uint16_t one = 0x3C00;
        size_t d_off = 0;
        switch (t) {
          case DType::Q2_K: d_off = offsetof(quant::BlockQ2_K, d); break;
          case DType::Q3_K: d_off = offsetof(quant::BlockQ3_K, d); break;
          case DType::Q4_K: d_off = offsetof(quant::BlockQ4_K, d); break;
          case DType::Q5_K: d_off = offsetof(quant::BlockQ5_K, d); break;
          default: d_off = offsetof(quant::BlockQ6_K, d); break;
        }
        std::memcpy(&w[b + d_off], &one, 2);
        if (t == DType::Q2_K || t == DType::Q4_K || t == DType::Q5_K) std::memcpy(&w[b + d_off + 2], &one, 2);
        if (t == DType::Q6_K && fill == 0)  // scales 0 would hide the quants: use -128
          std::memset(&w[b + offsetof(quant::BlockQ6_K, scales)], 0x80, 16);
      }
      std::vector<uint8_t> a((n / kQK) * sizeof(quant::BlockQ8_K));
      for (size_t b = 0; b < a.size(); b += sizeof(quant::BlockQ8_K)) {
        quant::BlockQ8_K blk;
        blk.d = 0.01f;
        for (int i = 0; i < kQK; ++i) blk.qs[i] = int8_t(pattern & 2 ? -128 : 127);
        for (int g = 0; g < 16; ++g) blk.bsums[g] = int16_t(16 * blk.qs[16 * g]);
        std::memcpy(&a[b], &blk, sizeof blk);
      }
      std::vector<float> wf(n), af(n);
      dequantize_row(t, w.data(), wf.data(), n);
      dequantize_row(DType::Q8_K, a.data(), af.data(), n);
      double exact = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        exact += double(wf[i]) * af[i];
        mag += std::fabs(double(wf[i]) * af[i]);
      }
      const float want = ref.dot(n, w.data(), a.data());
      EXPECT_NEAR(want, exact, 1e-5 * mag + 1e-30) << traits(t).name << " pattern " << pattern;
      EXPECT_EQ(bits(k.dot(n, w.data(), a.data())), bits(want)) << traits(t).name << " pattern " << pattern;
    }
  }
}

// Tiles of random shape and padded strides equal the single dots, and write
// nothing outside the tile.
TEST_P(QDotKLevel, TileMatchesDots) {
  std::mt19937 rng(42);
  for (DType t : kTypes) {
    const QDotKernels ref = qdot_k_kernels(t, SimdLevel::Reference);
    const QDotKernels k = qdot_k_kernels(t, GetParam());
    ASSERT_TRUE(k) << traits(t).name << " has no " << level_name(GetParam()) << " kernel";
    for (int nb : kBlockCounts) {
      const int64_t n = nb * kQK;
      const int mr = 1 + int(rng() % kTileMax), nr = 1 + int(rng() % kTileMax);
      const size_t wrow = row_bytes(t, n), arow = (n / kQK) * sizeof(quant::BlockQ8_K);
      const size_t wstride = wrow + 2 * (rng() % 3), astride = arow + 4 * (rng() % 3);
      const auto wr = random_weights(t, kTileMax, n, 77 + nb);
      const auto ar = random_acts(kTileMax, n, 88 + nb);
      std::vector<uint8_t> w(wstride * kTileMax), a(astride * kTileMax);
      for (int r = 0; r < kTileMax; ++r) {
        std::memcpy(&w[r * wstride], &wr[r * wrow], wrow);
        std::memcpy(&a[r * astride], &ar[r * arow], arow);
      }
      const size_t ldy = mr + rng() % 3;
      std::vector<float> y(ldy * nr + 1, NAN);
      k.tile(n, w.data(), wstride, mr, a.data(), astride, nr, y.data(), ldy);
      for (int j = 0; j < nr; ++j)
        for (size_t i = 0; i < ldy; ++i) {
          const float got = y[j * ldy + i];
          if (int(i) >= mr) {
            EXPECT_TRUE(std::isnan(got)) << "wrote outside the tile at " << i << "," << j;
            continue;
          }
          const float want = ref.dot(n, &w[i * wstride], &a[j * astride]);
          EXPECT_EQ(bits(got), bits(want))
              << traits(t).name << " blocks " << nb << " tile " << mr << "x" << nr << " at " << i << "," << j;
        }
      EXPECT_TRUE(std::isnan(y.back()));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, QDotKLevel,
                         ::testing::Values(SimdLevel::AVX2, SimdLevel::AVX512, SimdLevel::AVX512_VNNI),
                         [](const auto& info) { return std::string(level_name(info.param)); });

}  // namespace
}  // namespace weir::cpu
