// Activation rounding (llama.cpp's Q8_0 / Q8_K / F16 activation formats):
// checked against the formats' definitions, element by element.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/act_quant.h"
#include "core/half.h"

namespace weir::cpu {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(ActQuant, Q8_0IsIntegerMultiplesOfAnF16ScaleWithinHalfAStep) {
  auto x = random_values(32 * 37, 1, 3.0f);
  x[5] = 0.0f;
  for (int j = 32; j < 64; ++j) x[j] = 0.0f;  // an all-zero block
  std::vector<float> y(x.size());
  round_q8_0(x.data(), y.data(), int64_t(x.size()));
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
    const float d = fp16_to_f32(f32_to_fp16(amax / 127.0f));
    for (int j = 0; j < 32; ++j) {
      if (amax == 0) {
        EXPECT_EQ(y[b + j], 0.0f);
        continue;
      }
      const float q = y[b + j] / d;
      EXPECT_EQ(q, std::round(q)) << b + j;
      EXPECT_LE(std::fabs(q), 127.0f);
      EXPECT_LE(std::fabs(x[b + j] * 127.0f / amax - q), 0.5f + 1e-4f) << b + j;
    }
  }
}

TEST(ActQuant, Q8_KMapsTheLargestMagnitudeToMinus127) {
  auto x = random_values(256 * 5, 2, 0.7f);
  std::vector<float> y(x.size());
  round_q8_K(x.data(), y.data(), int64_t(x.size()));
  for (size_t b = 0; b < x.size(); b += 256) {
    size_t imax = b;
    for (size_t j = b; j < b + 256; ++j)
      if (std::fabs(x[j]) > std::fabs(x[imax])) imax = j;
    const float d = -x[imax] / 127.0f;  // 1 / iscale, with iscale = -127 / max
    EXPECT_NEAR(y[imax], x[imax], std::fabs(x[imax]) * 1e-6f);
    for (size_t j = b; j < b + 256; ++j) {
      const float q = y[j] / d;
      EXPECT_NEAR(q, std::round(q), 1e-3f) << j;
      EXPECT_LE(q, 127.5f);
      EXPECT_LE(std::fabs(x[j] - y[j]), std::fabs(d) * 0.5f * (1 + 1e-5f)) << j;
    }
  }
}

TEST(ActQuant, HalfRoundingAndTypes) {
  const float x[4] = {1.0f / 3.0f, 65504.0f, -2.5e-8f, 1e6f};
  float y[4];
  round_f16(x, y, 4);
  EXPECT_EQ(y[0], fp16_to_f32(f32_to_fp16(1.0f / 3.0f)));
  EXPECT_EQ(y[1], 65504.0f);
  EXPECT_TRUE(std::isinf(y[3]));
  EXPECT_EQ(activation_type(DType::Q5_0), DType::Q8_0);
  EXPECT_EQ(activation_type(DType::Q4_K), DType::Q8_K);
  EXPECT_EQ(activation_type(DType::Q6_K), DType::Q8_K);
  EXPECT_EQ(activation_type(DType::F32), DType::F32);
  EXPECT_EQ(activation_type(DType::BF16), DType::BF16);
}

}  // namespace
}  // namespace weir::cpu
