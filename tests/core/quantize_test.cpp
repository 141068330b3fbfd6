// Reference quantizers of the float and legacy formats against the gguf
// package's numpy quantizer: tests/data/quant/<type>.vec hold input rows of
// several kinds and the bytes numpy makes of them
// (tests/data/make_quant_vectors.py writes them); quantize_rows must
// reproduce them byte for byte. Also the dispatcher's contract.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/quant/quantize.h"
#include "test_env.h"

namespace weir {
namespace {

struct Case {
  int64_t n_rows = 0, n_per_row = 0;
  std::vector<float> input;
  std::vector<uint8_t> expected;
};

// u32 type id, u32 n_cases, then per case: u32 n_rows, u32 n_per_row,
// the float32 rows, the expected bytes.
std::vector<Case> load_cases(DType t) {
  const std::string path = test::data_dir() + "/quant/" + dtype_name(t) + ".vec";
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path << " (run python3 tests/data/make_quant_vectors.py)";
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<Case> cases;
  size_t off = 0;
  auto u32 = [&](uint32_t* v) {
    if (off + 4 > bytes.size()) return false;
    std::memcpy(v, bytes.data() + off, 4);
    off += 4;
    return true;
  };
  uint32_t id = 0, n_cases = 0;
  if (!u32(&id) || !u32(&n_cases) || id != uint32_t(t)) {
    ADD_FAILURE() << path << ": bad header";
    return cases;
  }
  for (uint32_t c = 0; c < n_cases; ++c) {
    uint32_t rows = 0, per_row = 0;
    if (!u32(&rows) || !u32(&per_row)) break;
    Case k;
    k.n_rows = rows;
    k.n_per_row = per_row;
    const size_t n_in = size_t(rows) * per_row * 4, n_out = size_t(rows) * row_bytes(t, per_row);
    if (off + n_in + n_out > bytes.size()) break;
    k.input.resize(size_t(rows) * per_row);
    std::memcpy(k.input.data(), bytes.data() + off, n_in);
    off += n_in;
    k.expected.assign(bytes.begin() + off, bytes.begin() + off + n_out);
    off += n_out;
    cases.push_back(std::move(k));
  }
  EXPECT_EQ(cases.size(), n_cases) << path << ": truncated";
  EXPECT_EQ(off, bytes.size()) << path << ": trailing bytes";
  return cases;
}

class QuantizeVectors : public ::testing::TestWithParam<DType> {};

TEST_P(QuantizeVectors, MatchesGgufPackageBitExact) {
  const DType t = GetParam();
  const std::vector<Case> cases = load_cases(t);
  ASSERT_FALSE(cases.empty());
  for (size_t c = 0; c < cases.size(); ++c) {
    const Case& k = cases[c];
    std::vector<uint8_t> got(k.expected.size() + 1, 0xAB);  // one guard byte
    quant::quantize_rows(t, k.input.data(), got.data(), k.n_rows, k.n_per_row);
    EXPECT_EQ(got.back(), 0xAB) << "wrote past the end, case " << c;
    got.pop_back();
    size_t first = 0, bad = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != k.expected[i] && bad++ == 0) first = i;
    EXPECT_EQ(bad, 0u) << dtype_name(t) << " case " << c << " (" << k.n_rows << "x" << k.n_per_row
                       << "): first differing byte " << first << " of " << got.size() << ": expected "
                       << int(k.expected[first]) << ", got " << int(got[first]);
  }
}

// Row by row gives the same bytes as all rows at once (rows independent).
TEST_P(QuantizeVectors, RowByRow) {
  const DType t = GetParam();
  for (const Case& k : load_cases(t)) {
    const size_t rb = row_bytes(t, k.n_per_row);
    std::vector<uint8_t> got(k.expected.size());
    for (int64_t r = 0; r < k.n_rows; ++r)
      quant::quantize_rows(t, k.input.data() + r * k.n_per_row, got.data() + r * rb, 1, k.n_per_row);
    EXPECT_EQ(got, k.expected) << dtype_name(t);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, QuantizeVectors,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1,
                                           DType::Q5_0, DType::Q5_1, DType::Q8_0),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Quantize, CanQuantizeListsTheProducedTypes) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                  DType::Q8_0, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K})
    EXPECT_TRUE(quant::can_quantize(t)) << dtype_name(t);
  for (DType t : {DType::Q8_1, DType::I8, DType::I32, DType::F64}) EXPECT_FALSE(quant::can_quantize(t)) << dtype_name(t);
}

TEST(Quantize, UnsupportedTypeErrorNamesType) {
  float src[32] = {};
  uint8_t dst[64];
  try {
    quant::quantize_rows(DType::Q8_1, src, dst, 1, 32);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q8_1"), std::string::npos) << e.what();
  }
}

TEST(Quantize, PartialBlockThrows) {
  std::vector<float> src(256);
  std::vector<uint8_t> dst(1024);
  EXPECT_THROW(quant::quantize_rows(DType::Q4_K, src.data(), dst.data(), 1, 100), Error);
  EXPECT_THROW(quant::quantize_rows(DType::Q8_0, src.data(), dst.data(), 1, 33), Error);
  EXPECT_NO_THROW(quant::quantize_rows(DType::Q8_0, nullptr, nullptr, 0, 32));
}

}  // namespace
}  // namespace weir
