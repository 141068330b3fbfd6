// Integer dot kernels (backend/cpu/qdot.h): every SIMD level this CPU has
// against the reference kernels (bit for bit: all levels keep the same float
// order), the reference against a double-precision dot of the dequantized
// values, and quantize_act against round_q8_0 / round_q8_K. Levels the CPU
// lacks are skipped with a message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/qdot.h"
#include "core/dtype.h"
#include "core/half.h"

namespace weir::cpu {
namespace {

const DType kLegacy[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0};
const int kBlockCounts[] = {1, 3, 7, 33};

std::vector<float> randn(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// rows x n weights of type t: random bytes with sane fp16 scale (and min)
// fields, so every quant bit pattern occurs (e.g. -128 for Q8_0).
std::vector<uint8_t> random_weights(DType t, int64_t rows, int64_t n, std::mt19937& rng) {
  const size_t row = row_bytes(t, n), bs = traits(t).type_size;
  std::vector<uint8_t> w(row * size_t(rows));
  for (uint8_t& b : w) b = uint8_t(rng());
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  const bool has_min = t == DType::Q4_1 || t == DType::Q5_1;
  for (size_t off = 0; off < w.size(); off += bs) {
    const uint16_t d = f32_to_fp16(scale(rng)), m = f32_to_fp16(scale(rng) * 4);
    std::memcpy(&w[off], &d, 2);
    if (has_min) std::memcpy(&w[off + 2], &m, 2);
  }
  return w;
}

std::vector<uint8_t> quantized_acts(DType w, int64_t rows, int64_t n, std::mt19937& rng) {
  const size_t row = act_row_bytes(w, n);
  std::vector<uint8_t> a(row * size_t(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const auto x = randn(size_t(n), rng, 2.0f);
    quantize_act(activation_type(w), x.data(), &a[size_t(r) * row], n, SimdLevel::Reference);
  }
  return a;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// ---------------------------------------------------------------------------
// The reference kernels against the formats' definitions.

TEST(QDotReference, LegacyDotMatchesDequantizedValuesInDouble) {
  std::mt19937 rng(11);
  for (DType t : kLegacy) {
    const QDotKernels ref = qdot_kernels(t, SimdLevel::Reference);
    ASSERT_TRUE(ref) << dtype_name(t);
    for (int nb : kBlockCounts) {
      const int64_t n = 32 * nb;
      const auto w = random_weights(t, 1, n, rng);
      const auto a = quantized_acts(t, 1, n, rng);
      std::vector<float> wf(static_cast<size_t>(n)), af(static_cast<size_t>(n));
      dequantize_row(t, w.data(), wf.data(), n);
      dequantize_row(DType::Q8_0, a.data(), af.data(), n);
      double exact = 0, mag = 0;
      for (int64_t k = 0; k < n; ++k) {
        exact += double(wf[size_t(k)]) * af[size_t(k)];
        mag += std::fabs(double(wf[size_t(k)]) * af[size_t(k)]);
      }
      // The min term uses fp16(d * sum a) as llama.cpp's Q8_1 does: allow its rounding.
      const double tol = 1e-5 * mag + 1e-6 + (t == DType::Q4_1 || t == DType::Q5_1 ? 1e-3 * mag : 0);
      EXPECT_NEAR(ref.dot(n, w.data(), a.data()), exact, tol) << dtype_name(t) << " blocks " << nb;
    }
  }
}

// ---------------------------------------------------------------------------
// SIMD levels against the reference.

class QDotLevel : public testing::TestWithParam<SimdLevel> {
 protected:
  void SetUp() override {
    if (int(GetParam()) > int(hardware_simd_level()))
      GTEST_SKIP() << "this CPU lacks " << simd_level_name(GetParam()) << " (has "
                   << simd_level_name(hardware_simd_level()) << ")";
  }
};

TEST_P(QDotLevel, LegacyDotEqualsReferenceBitForBit) {
  std::mt19937 rng(21);
  for (DType t : kLegacy) {
    const QDotKernels ref = qdot_kernels(t, SimdLevel::Reference);
    const QDotKernels k = qdot_kernels(t, GetParam());
    ASSERT_TRUE(k) << dtype_name(t);
    if (GetParam() != SimdLevel::Reference) {
      ASSERT_NE(k.dot, ref.dot) << dtype_name(t) << ": no SIMD kernel at " << simd_level_name(GetParam());
    }
    for (int nb : kBlockCounts) {
      const int64_t n = 32 * nb;
      for (int rep = 0; rep < 4; ++rep) {
        const auto w = random_weights(t, 1, n, rng);
        const auto a = quantized_acts(t, 1, n, rng);
        const float want = ref.dot(n, w.data(), a.data());
        const float got = k.dot(n, w.data(), a.data());
        EXPECT_EQ(bits(got), bits(want)) << dtype_name(t) << " blocks " << nb << ": " << got << " vs " << want;
      }
    }
  }
}

TEST_P(QDotLevel, LegacyTileEqualsReferenceDotsForEveryShape) {
  std::mt19937 rng(31);
  for (DType t : kLegacy) {
    const QDotKernels ref = qdot_kernels(t, SimdLevel::Reference);
    const QDotKernels k = qdot_kernels(t, GetParam());
    ASSERT_TRUE(k);
    for (int nb : {1, 7, 33}) {
      const int64_t n = 32 * nb;
      // Row strides with slack, so rows are not back to back.
      const size_t wstride = row_bytes(t, n) + 6, astride = act_row_bytes(t, n) + 10;
      std::vector<uint8_t> w(wstride * kTileMax), a(astride * kTileMax);
      for (int i = 0; i < kTileMax; ++i) {
        const auto wr = random_weights(t, 1, n, rng);
        const auto ar = quantized_acts(t, 1, n, rng);
        std::memcpy(&w[size_t(i) * wstride], wr.data(), wr.size());
        std::memcpy(&a[size_t(i) * astride], ar.data(), ar.size());
      }
      for (int mr = 1; mr <= kTileMax; ++mr)
        for (int nr = 1; nr <= kTileMax; ++nr) {
          const size_t ldy = kTileMax + 3;
          std::vector<float> y(ldy * kTileMax, -1.0f);
          k.tile(n, w.data(), wstride, mr, a.data(), astride, nr, y.data(), ldy);
          for (int j = 0; j < kTileMax; ++j)
            for (int i = 0; i < int(ldy); ++i) {
              const float got = y[size_t(j) * ldy + size_t(i)];
              if (i >= mr || j >= nr) {
                EXPECT_EQ(got, -1.0f) << "tile wrote outside " << mr << "x" << nr;
                continue;
              }
              const float want = ref.dot(n, &w[size_t(i) * wstride], &a[size_t(j) * astride]);
              EXPECT_EQ(bits(got), bits(want))
                  << dtype_name(t) << " blocks " << nb << " tile " << mr << "x" << nr << " at " << i << "," << j;
            }
        }
    }
  }
}

// quantize_act must give exactly the values the float rounding stands for.
TEST_P(QDotLevel, QuantizeActEqualsRounding) {
  std::mt19937 rng(41);
  for (DType act : {DType::Q8_0, DType::Q8_K}) {
    const int64_t bs = traits(act).block_size;
    for (int nb : {1, 3, 7}) {
      const int64_t n = bs * nb;
      auto x = randn(size_t(n), rng, 3.0f);
      for (int64_t j = 0; j < bs; ++j) x[size_t(j)] = 0.0f;  // an all-zero block
      if (nb > 1) {  // the largest magnitude twice, opposite signs: the first one wins
        x[size_t(bs + 3)] = 9.5f;
        x[size_t(bs + 9)] = -9.5f;
      }
      if (nb > 2) {  // amax 127: scale 1, so x.5 values are ties (to even)
        x[size_t(2 * bs)] = 127.0f;
        x[size_t(2 * bs + 1)] = 2.5f;
        x[size_t(2 * bs + 2)] = -3.5f;
      }
      std::vector<float> want(static_cast<size_t>(n));
      (act == DType::Q8_0 ? round_q8_0 : round_q8_K)(x.data(), want.data(), n);
      std::vector<uint8_t> q(row_bytes(act, n)), qref(q.size());
      quantize_act(act, x.data(), q.data(), n, GetParam());
      quantize_act(act, x.data(), qref.data(), n, SimdLevel::Reference);
      EXPECT_EQ(q, qref) << dtype_name(act) << " blocks " << nb << ": bytes differ from the reference";
      std::vector<float> got(static_cast<size_t>(n));
      dequantize_row(act, q.data(), got.data(), n);
      for (int64_t j = 0; j < n; ++j)  // == : the float rounding may give -0 where a quant is 0
        ASSERT_EQ(got[size_t(j)], want[size_t(j)]) << dtype_name(act) << " element " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, QDotLevel,
                         testing::Values(SimdLevel::Reference, SimdLevel::AVX2, SimdLevel::AVX512,
                                         SimdLevel::AVX512_VNNI),
                         [](const testing::TestParamInfo<SimdLevel>& i) {
                           return std::string(simd_level_name(i.param));
                         });

TEST(QDotDispatch, TypesWithoutIntegerKernelsHaveNone) {
  EXPECT_FALSE(qdot_kernels(DType::F32));
  EXPECT_FALSE(qdot_kernels(DType::F16));
  EXPECT_TRUE(qdot_kernels(DType::Q5_0));
  EXPECT_EQ(act_row_bytes(DType::Q5_0, 64), 2 * 34u);
  EXPECT_EQ(act_row_bytes(DType::Q6_K, 512), 2 * 292u);
}

}  // namespace
}  // namespace weir::cpu
