// K-quant quantizers on synthetic data: llama.cpp's published round-trip
// thresholds, error ordering between types, and edge cases (exactly
// representable data, zeros, constants, huge and tiny magnitudes).
// tests/core/quantize_model_test.cpp compares with llama.cpp-made blocks.

#include <gtest/gtest.h>

#include <ctime>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/quant/quantize.h"
#include "quant_test_util.h"

namespace weir {
namespace {

using test::round_trip;

const DType kKTypes[] = {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K};

// llama.cpp tests/test-quantize-fns.cpp: data 0.1 + 2 cos(i) for i < 4096,
// error sqrt(sum of squared differences) / n, at most 0.0075 for 2-bit
// types, 0.0040 for 3-bit types and 0.002 for the others. Facts from that
// file; the code here is ours.
TEST(QuantizeK, LlamaCppSyntheticThresholds) {
  const int n = 32 * 128;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = 0.1f + 2.0f * std::cos(float(i));
  const struct { DType t; double max; } cases[] = {
      {DType::Q2_K, 0.0075}, {DType::Q3_K, 0.0040}, {DType::Q4_K, 0.002}, {DType::Q5_K, 0.002},
      {DType::Q6_K, 0.002},  {DType::Q8_K, 0.002},  {DType::Q4_0, 0.002}, {DType::Q4_1, 0.002},
      {DType::Q5_0, 0.002},  {DType::Q5_1, 0.002},  {DType::Q8_0, 0.002}};
  for (const auto& c : cases) {
    const double err = std::sqrt(test::sum_sq_diff(x, round_trip(c.t, x, n))) / n;
    std::printf("  %-5s test-quantize-fns error %.6f (limit %.4f)\n", dtype_name(c.t), err, c.max);
    EXPECT_LT(err, c.max) << dtype_name(c.t);
  }
}

// More bits, less error, on normal data.
TEST(QuantizeK, ErrorFallsWithBits) {
  const std::vector<float> x = test::normal_data(256 * 64, 1.0, 1);
  const DType order[] = {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_0};
  double prev = INFINITY;
  for (DType t : order) {
    const double e = test::rms_diff(x, round_trip(t, x, 256));
    std::printf("  %-5s rms error on N(0,1): %.5f\n", dtype_name(t), e);
    EXPECT_LT(e, prev) << dtype_name(t);
    prev = e;
  }
}

// Data a block format holds exactly comes back (nearly) unchanged: quantize
// random data, dequantize, and quantize that again.
TEST(QuantizeK, RepresentableDataRoundTrips) {
  for (DType t : kKTypes) {
    const std::vector<float> x = test::normal_data(256 * 32, 1.0, 2);
    const std::vector<float> y = round_trip(t, x, 256);
    const std::vector<float> y2 = round_trip(t, y, 256);
    const double first = test::rms_diff(x, y), again = test::rms_diff(y, y2);
    std::printf("  %-5s first pass %.3g, second pass %.3g\n", dtype_name(t), first, again);
    EXPECT_LE(again, 0.01 * first) << dtype_name(t);
  }
}

TEST(QuantizeK, ZerosStayZero) {
  const std::vector<float> x(512, 0.0f);
  for (DType t : kKTypes) {
    const std::vector<float> y = round_trip(t, x, 256);
    for (float v : y) ASSERT_EQ(v, 0.0f) << dtype_name(t);
  }
}

// Constant blocks come back within fp16's precision of the super-block
// scale (2^-11 relative, times a small integer scale); for 1e-3 the scale d
// is an fp16 subnormal with fewer significant bits, hence 1%.
TEST(QuantizeK, ConstantBlocks) {
  const struct { float c; double rel; } cases[] = {
      {1.0f, 2e-3}, {-1.0f, 2e-3}, {0.37f, 2e-3}, {-123.0f, 2e-3}, {1e-3f, 1e-2}};
  for (const auto& k : cases) {
    const std::vector<float> x(256, k.c);
    for (DType t : kKTypes) {
      const std::vector<float> y = round_trip(t, x, 256);
      double worst = 0;
      for (float v : y) worst = std::max(worst, std::fabs(double(v) - k.c));
      EXPECT_LE(worst, k.rel * std::fabs(k.c)) << dtype_name(t) << " constant " << k.c;
    }
  }
}

// Magnitudes near the ends of fp16's range: no inf or NaN, error bounded.
TEST(QuantizeK, HugeAndTinyMagnitudes) {
  for (double sigma : {1e5, 1e3, 1e-3, 1e-6}) {
    const std::vector<float> x = test::normal_data(256 * 8, sigma, 3);
    for (DType t : kKTypes) {
      const std::vector<float> y = round_trip(t, x, 256);
      EXPECT_TRUE(test::all_finite(y)) << dtype_name(t) << " sigma " << sigma;
      EXPECT_LE(test::rms_diff(x, y), test::rms(x)) << dtype_name(t) << " sigma " << sigma;
    }
  }
  // Moderate magnitudes keep their usual relative error.
  const std::vector<float> x = test::normal_data(256 * 8, 1e3, 4);
  const std::vector<float> x1 = test::normal_data(256 * 8, 1.0, 4);
  for (DType t : kKTypes) {
    const double rel = test::rms_diff(x, round_trip(t, x, 256)) / test::rms(x);
    const double rel1 = test::rms_diff(x1, round_trip(t, x1, 256)) / test::rms(x1);
    EXPECT_NEAR(rel, rel1, 0.05 * rel1) << dtype_name(t);
  }
}

// Single large outliers do not break the other sub-blocks' scales.
TEST(QuantizeK, OutliersStayFinite) {
  std::vector<float> x = test::normal_data(256 * 4, 0.02, 5);
  x[3] = 40.0f;
  x[300] = -55.0f;
  x[700] = 1e4f;
  for (DType t : kKTypes) {
    const std::vector<float> y = round_trip(t, x, 256);
    EXPECT_TRUE(test::all_finite(y)) << dtype_name(t);
  }
}

// Rows are independent: quantizing rows one at a time gives the same bytes.
TEST(QuantizeK, RowsIndependent) {
  const std::vector<float> x = test::normal_data(512 * 3, 1.0, 6);
  for (DType t : kKTypes) {
    const size_t rb = row_bytes(t, 512);
    std::vector<uint8_t> all(3 * rb), one(3 * rb);
    quant::quantize_rows(t, x.data(), all.data(), 3, 512);
    for (int r = 0; r < 3; ++r) quant::quantize_rows(t, x.data() + r * 512, one.data() + r * rb, 1, 512);
    EXPECT_EQ(all, one) << dtype_name(t);
  }
}

}  // namespace
}  // namespace weir
