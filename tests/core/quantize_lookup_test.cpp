// IQ4_NL, IQ4_XS and MXFP4 quantizers, and Q2_K ... Q6_K, Q4_0 ... Q5_1
// with importance weights, byte for byte against independent references:
// tests/data/quant/<type>.lvec hold input rows (random, zeros, constants,
// zero sub-blocks, ties, outliers, tiny, below 1e-15, huge), with and
// without importance weights, and the bytes that
// tests/reference/iq4_quantize.py and k_quantize_weighted.py (numpy,
// float32, llama.cpp's published rules) or, for MXFP4, the gguf package
// make of them (tests/data/make_lookup_quant_vectors.py writes the files).

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/quant/quantize.h"
#include "quant_test_util.h"
#include "test_env.h"

namespace weir {
namespace {

struct Case {
  int64_t n_rows = 0, n_per_row = 0;
  std::vector<float> weights;  // empty: none
  std::vector<float> input;
  std::vector<uint8_t> expected;
};

std::vector<Case> load_cases(DType t) {
  const std::string path = test::data_dir() + "/quant/" + dtype_name(t) + ".lvec";
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path << " (run python3 tests/data/make_lookup_quant_vectors.py)";
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t off = 0;
  auto take = [&](void* dst, size_t n) {
    if (off + n > bytes.size()) return false;
    std::memcpy(dst, bytes.data() + off, n);
    off += n;
    return true;
  };
  std::vector<Case> cases;
  uint32_t id = 0, n_cases = 0;
  if (!take(&id, 4) || !take(&n_cases, 4) || id != uint32_t(t)) {
    ADD_FAILURE() << path << ": bad header";
    return cases;
  }
  for (uint32_t c = 0; c < n_cases; ++c) {
    uint32_t h[3];
    if (!take(h, sizeof h)) break;
    Case k;
    k.n_rows = h[0];
    k.n_per_row = h[1];
    if (h[2]) {
      k.weights.resize(h[1]);
      if (!take(k.weights.data(), 4 * size_t(h[1]))) break;
    }
    k.input.resize(size_t(h[0]) * h[1]);
    k.expected.resize(size_t(h[0]) * row_bytes(t, h[1]));
    if (!take(k.input.data(), 4 * k.input.size()) || !take(k.expected.data(), k.expected.size())) break;
    cases.push_back(std::move(k));
  }
  EXPECT_EQ(cases.size(), n_cases) << path << ": truncated";
  EXPECT_EQ(off, bytes.size()) << path << ": trailing bytes";
  return cases;
}

class QuantizeLookup : public ::testing::TestWithParam<DType> {};

TEST_P(QuantizeLookup, MatchesReferenceBytes) {
  const DType t = GetParam();
  const std::vector<Case> cases = load_cases(t);
  ASSERT_FALSE(cases.empty());
  int weighted = 0;
  for (size_t c = 0; c < cases.size(); ++c) {
    const Case& k = cases[c];
    weighted += !k.weights.empty();
    std::vector<uint8_t> got(k.expected.size() + 1, 0xAB);  // one guard byte
    quant::quantize_rows(t, k.input.data(), got.data(), k.n_rows, k.n_per_row,
                         k.weights.empty() ? nullptr : k.weights.data());
    EXPECT_EQ(got.back(), 0xAB) << "wrote past the end, case " << c;
    got.pop_back();
    size_t first = 0, bad = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != k.expected[i] && bad++ == 0) first = i;
    EXPECT_EQ(bad, 0u) << dtype_name(t) << " case " << c << " (" << k.n_rows << "x" << k.n_per_row
                       << (k.weights.empty() ? "" : ", weighted") << "): " << bad << " bytes differ, first "
                       << first << ": expected " << int(k.expected[first]) << ", got " << int(got[first]);
  }
  if (t != DType::MXFP4) {
    EXPECT_GT(weighted, 10);
  }
  if (t != DType::IQ4_NL && t != DType::IQ4_XS && t != DType::MXFP4) {
    EXPECT_EQ(size_t(weighted), cases.size());  // weighted only (the .vec files and K tests cover the rest)
  }
}

// Row by row gives the same bytes as all rows at once.
TEST_P(QuantizeLookup, RowByRow) {
  const DType t = GetParam();
  for (const Case& k : load_cases(t)) {
    const size_t rb = row_bytes(t, k.n_per_row);
    std::vector<uint8_t> got(k.expected.size());
    for (int64_t r = 0; r < k.n_rows; ++r)
      quant::quantize_rows(t, k.input.data() + r * k.n_per_row, got.data() + r * rb, 1, k.n_per_row,
                           k.weights.empty() ? nullptr : k.weights.data());
    EXPECT_EQ(got, k.expected) << dtype_name(t);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, QuantizeLookup,
                         ::testing::Values(DType::IQ4_NL, DType::IQ4_XS, DType::MXFP4, DType::Q2_K, DType::Q3_K,
                                           DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q4_0, DType::Q4_1,
                                           DType::Q5_0, DType::Q5_1),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Importance weights move the error to where the weights are: the weighted
// squared error, measured with the weights used, is lower than without them.
TEST(QuantizeLookup, ImportanceLowersWeightedError) {
  for (DType t : {DType::IQ4_NL, DType::IQ4_XS, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K,
                  DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1}) {
    const int64_t n = 1024, rows = 16;
    const std::vector<float> x = test::normal_data(size_t(n * rows), 1.0, 7);
    test::Rng r(11);
    std::vector<float> w(n);
    for (float& v : w) v = float(r.uniform() < 0.1 ? 50.0 : 0.1);
    std::vector<uint8_t> a(size_t(rows) * row_bytes(t, n)), b(a.size());
    quant::quantize_rows(t, x.data(), a.data(), rows, n);
    quant::quantize_rows(t, x.data(), b.data(), rows, n, w.data());
    std::vector<float> ya(x.size()), yb(x.size());
    dequantize_row(t, a.data(), ya.data(), int64_t(x.size()));
    dequantize_row(t, b.data(), yb.data(), int64_t(x.size()));
    double ea = 0, eb = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      ea += w[i % n] * (ya[i] - x[i]) * (ya[i] - x[i]);
      eb += w[i % n] * (yb[i] - x[i]) * (yb[i] - x[i]);
    }
    std::printf("  %s weighted error: plain %.4g, with importance %.4g\n", dtype_name(t), ea, eb);
    EXPECT_LT(eb, 0.9 * ea) << dtype_name(t);
  }
}

}  // namespace
}  // namespace weir
