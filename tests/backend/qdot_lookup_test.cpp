// Integer dot kernels of the lookup types IQ4_NL, IQ4_XS and MXFP4
// (backend/cpu/qdot_lookup.h): the reference against a double-precision dot
// of the dequantized weights and activations (dequantize_row, itself checked
// against the gguf package), every SIMD level against the reference bit for
// bit (all keep the same float order), and the tile against the dots.
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

const DType kLookup[] = {DType::IQ4_NL, DType::IQ4_XS, DType::MXFP4};
const int kGroupCounts[] = {8, 24, 56, 264};  // groups of 32: whole IQ4_XS super-blocks

// rows x n weights of type t: random bytes (every quant, every IQ4_XS
// sub-block scale) with a sane scale per block: fp16 d in +-0.05, or an
// E8M0 exponent in 2^-10 .. 2^2.
std::vector<uint8_t> lookup_weights(DType t, int64_t rows, int64_t n, std::mt19937& rng) {
  const size_t bs = traits(t).type_size;
  std::vector<uint8_t> w(row_bytes(t, n) * size_t(rows));
  for (uint8_t& b : w) b = uint8_t(rng());
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  for (size_t off = 0; off < w.size(); off += bs) {
    if (t == DType::MXFP4) {
      w[off] = uint8_t(117 + rng() % 13);
    } else {
      const uint16_t d = f32_to_fp16(scale(rng));
      std::memcpy(&w[off], &d, 2);
    }
  }
  return w;
}

std::vector<uint8_t> lookup_acts(DType w, int64_t rows, int64_t n, std::mt19937& rng) {
  const size_t row = act_row_bytes(w, n);
  std::vector<uint8_t> a(row * size_t(rows));
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : x) v = nd(rng);
    quantize_act(activation_type(w), x.data(), &a[size_t(r) * row], n, SimdLevel::Reference);
  }
  return a;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(QDotLookup, ActivationTypesAreLlamaCpps) {
  EXPECT_EQ(activation_type(DType::IQ4_NL), DType::Q8_0);
  EXPECT_EQ(activation_type(DType::MXFP4), DType::Q8_0);
  EXPECT_EQ(activation_type(DType::IQ4_XS), DType::Q8_K);
}

TEST(QDotLookup, ReferenceMatchesDequantizedValuesInDouble) {
  std::mt19937 rng(47);
  for (DType t : kLookup) {
    const QDotKernels ref = qdot_kernels(t, SimdLevel::Reference);
    ASSERT_TRUE(ref) << dtype_name(t);
    for (int groups : kGroupCounts) {
      const int64_t n = 32 * groups;
      for (int rep = 0; rep < 3; ++rep) {
        const auto w = lookup_weights(t, 1, n, rng);
        const auto a = lookup_acts(t, 1, n, rng);
        std::vector<float> wf(static_cast<size_t>(n)), af(static_cast<size_t>(n));
        dequantize_row(t, w.data(), wf.data(), n);
        dequantize_row(activation_type(t), a.data(), af.data(), n);
        double exact = 0, mag = 0;
        for (size_t k = 0; k < wf.size(); ++k) {
          exact += double(wf[k]) * af[k];
          mag += std::fabs(double(wf[k]) * af[k]);
        }
        EXPECT_NEAR(ref.dot(n, w.data(), a.data()), exact, 1e-5 * mag + 1e-6)
            << dtype_name(t) << " n " << n;
      }
    }
  }
}

class QDotLookupLevel : public testing::TestWithParam<SimdLevel> {
 protected:
  void SetUp() override {
    if (int(GetParam()) > int(hardware_simd_level()))
      GTEST_SKIP() << "this CPU lacks " << simd_level_name(GetParam());
  }
};

TEST_P(QDotLookupLevel, DotEqualsReferenceBitForBit) {
  std::mt19937 rng(48);
  for (DType t : kLookup) {
    const QDotKernels ref = qdot_kernels(t, SimdLevel::Reference);
    const QDotKernels k = qdot_kernels(t, GetParam());
    ASSERT_TRUE(k) << dtype_name(t);
    if (GetParam() != SimdLevel::Reference) ASSERT_NE(k.dot, ref.dot) << dtype_name(t) << ": no SIMD kernel";
    for (int groups : kGroupCounts) {
      const int64_t n = 32 * groups;
      for (int rep = 0; rep < 4; ++rep) {
        const auto w = lookup_weights(t, 1, n, rng);
        const auto a = lookup_acts(t, 1, n, rng);
        const float want = ref.dot(n, w.data(), a.data()), got = k.dot(n, w.data(), a.data());
        EXPECT_EQ(bits(got), bits(want)) << dtype_name(t) << " n " << n << ": " << got << " vs " << want;
      }
    }
  }
}

TEST_P(QDotLookupLevel, TileEqualsReferenceDots) {
  std::mt19937 rng(49);
  for (DType t : kLookup) {
    const QDotKernels ref = qdot_kernels(t, SimdLevel::Reference);
    const QDotKernels k = qdot_kernels(t, GetParam());
    ASSERT_TRUE(k);
    const int64_t n = 512;
    const int mr = 5, nr = 3;
    const auto w = lookup_weights(t, mr, n, rng);
    const auto a = lookup_acts(t, nr, n, rng);
    const size_t ws = row_bytes(t, n), as = act_row_bytes(t, n), ldy = 7;
    std::vector<float> y(nr * ldy, -1.0f);
    k.tile(n, w.data(), ws, mr, a.data(), as, nr, y.data(), ldy);
    for (int j = 0; j < nr; ++j)
      for (int i = 0; i < mr; ++i)
        EXPECT_EQ(bits(y[j * ldy + i]), bits(ref.dot(n, &w[i * ws], &a[j * as])))
            << dtype_name(t) << " row " << i << " token " << j;
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, QDotLookupLevel,
                         testing::Values(SimdLevel::Reference, SimdLevel::AVX2, SimdLevel::AVX512,
                                         SimdLevel::AVX512_VNNI),
                         [](const testing::TestParamInfo<SimdLevel>& i) {
                           return std::string(simd_level_name(i.param));
                         });

}  // namespace
}  // namespace weir::cpu
