// Reference dequantizers against the gguf package's numpy dequantizer:
// tests/data/dequant/<type>.vec hold random blocks and the float32 values
// numpy gives for them (tests/data/make_dequant_vectors.py writes them);
// weir::dequantize_row must reproduce them bit for bit.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <iterator>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/half.h"
#include "core/quant/block_formats.h"
#include "test_env.h"

namespace weir {
namespace {

struct Vectors {
  uint32_t type_id = 0;
  int64_t n = 0;
  std::vector<uint8_t> raw;
  std::vector<float> expected;
};

// Reads a vector file: u32 type id, u32 n, raw bytes, n float32 (all LE).
Vectors load_vectors(DType t) {
  const std::string path = test::data_dir() + "/dequant/" + dtype_name(t) + ".vec";
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path
                        << " (run python3 tests/data/make_dequant_vectors.py)";
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  Vectors v;
  if (bytes.size() < 8) {
    ADD_FAILURE() << path << ": too short (" << bytes.size() << " bytes)";
    return v;
  }
  uint32_t n32;
  std::memcpy(&v.type_id, bytes.data(), 4);
  std::memcpy(&n32, bytes.data() + 4, 4);
  v.n = n32;
  const size_t raw_size = row_bytes(t, v.n);
  const size_t want = 8 + raw_size + size_t(v.n) * 4;
  if (bytes.size() != want) {
    ADD_FAILURE() << path << ": " << bytes.size() << " bytes, expected " << want;
    return v;
  }
  v.raw.assign(bytes.begin() + 8, bytes.begin() + 8 + raw_size);
  v.expected.resize(v.n);
  std::memcpy(v.expected.data(), bytes.data() + 8 + raw_size, size_t(v.n) * 4);
  return v;
}

// Bit-exact comparison (NaN matches any NaN); reports the first mismatch.
::testing::AssertionResult same_bits(const std::vector<float>& want, const std::vector<float>& got) {
  if (want.size() != got.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const bool both_nan = std::isnan(want[i]) && std::isnan(got[i]);
    if (!both_nan && bits_from_f32(want[i]) != bits_from_f32(got[i])) {
      if (mismatches++ == 0) first = i;
    }
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  char buf[160];
  std::snprintf(buf, sizeof buf, "%zu of %zu values differ; first at index %zu: expected %.9g (0x%08x), got %.9g (0x%08x)",
                mismatches, want.size(), first, double(want[first]), bits_from_f32(want[first]),
                double(got[first]), bits_from_f32(got[first]));
  return ::testing::AssertionFailure() << buf;
}

class DequantizeVectors : public ::testing::TestWithParam<DType> {};

TEST_P(DequantizeVectors, MatchesNumpyBitExact) {
  const DType t = GetParam();
  const Vectors v = load_vectors(t);
  ASSERT_FALSE(v.expected.empty());
  ASSERT_EQ(v.type_id, uint32_t(t));
  ASSERT_EQ(v.n % traits(t).block_size, 0);

  std::vector<float> got(v.n, std::nanf(""));
  dequantize_row(t, v.raw.data(), got.data(), v.n);
  EXPECT_TRUE(same_bits(v.expected, got)) << dtype_name(t);
}

// The same data at an odd address: the reference code must not depend on
// the alignment of the block structs.
TEST_P(DequantizeVectors, UnalignedSource) {
  const DType t = GetParam();
  const Vectors v = load_vectors(t);
  ASSERT_FALSE(v.expected.empty());
  std::vector<uint8_t> shifted(v.raw.size() + 1);
  std::memcpy(shifted.data() + 1, v.raw.data(), v.raw.size());
  std::vector<float> got(v.n);
  dequantize_row(t, shifted.data() + 1, got.data(), v.n);
  EXPECT_TRUE(same_bits(v.expected, got)) << dtype_name(t);
}

// Dequantizing block by block gives the same values as the whole row.
TEST_P(DequantizeVectors, BlockByBlock) {
  const DType t = GetParam();
  const Vectors v = load_vectors(t);
  ASSERT_FALSE(v.expected.empty());
  const DTypeTraits& tr = traits(t);
  std::vector<float> got(v.n);
  for (int64_t b = 0; b < v.n / tr.block_size; ++b)
    dequantize_row(t, v.raw.data() + b * tr.type_size, got.data() + b * tr.block_size, tr.block_size);
  EXPECT_TRUE(same_bits(v.expected, got)) << dtype_name(t);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DequantizeVectors,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q4_0,
                                           DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                                           DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K,
                                           DType::Q6_K, DType::Q8_K, DType::IQ4_NL,
                                           DType::IQ4_XS, DType::MXFP4),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Every type the traits table marks dequantizable has a dequantizer, and no
// other type does.
TEST(Dequantize, TraitsAgreeWithDispatch) {
  for (uint32_t id = 0; id < 64; ++id) {
    const DTypeTraits* tr = dtype_traits(id);
    if (!tr) continue;
    std::vector<uint8_t> src(tr->type_size, 0);
    std::vector<float> dst(tr->block_size);
    if (tr->dequantizable) {
      EXPECT_NO_THROW(dequantize_row(DType(id), src.data(), dst.data(), tr->block_size)) << tr->name;
    } else {
      EXPECT_THROW(dequantize_row(DType(id), src.data(), dst.data(), tr->block_size), Error)
          << tr->name;
    }
  }
}

TEST(Dequantize, UnsupportedTypeErrorNamesType) {
  for (DType t : {DType::Q8_1, DType::I8, DType::I32, DType::F64, DType(16) /* iq2_xxs */}) {
    const DTypeTraits& tr = traits(t);
    std::vector<uint8_t> src(tr.type_size, 0);
    std::vector<float> dst(tr.block_size);
    try {
      dequantize_row(t, src.data(), dst.data(), tr.block_size);
      ADD_FAILURE() << "no error for " << tr.name;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(tr.name), std::string::npos) << e.what();
    }
  }
}

TEST(Dequantize, UnknownTypeIdThrows) {
  float dst[1];
  uint8_t src[4] = {};
  EXPECT_THROW(dequantize_row(DType(4), src, dst, 1), Error);    // retired id
  EXPECT_THROW(dequantize_row(DType(999), src, dst, 1), Error);  // out of range
}

TEST(Dequantize, PartialBlockThrows) {
  std::vector<uint8_t> src(sizeof(quant::BlockQ4_K), 0);
  std::vector<float> dst(quant::kQK_K);
  try {
    dequantize_row(DType::Q4_K, src.data(), dst.data(), 100);
    ADD_FAILURE() << "no error for a partial block";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q4_K"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dequantize_row(DType::Q8_0, src.data(), dst.data(), -32), Error);
}

TEST(Dequantize, ZeroElementsIsANoOp) {
  EXPECT_NO_THROW(dequantize_row(DType::Q6_K, nullptr, nullptr, 0));
  EXPECT_NO_THROW(dequantize_row(DType::F32, nullptr, nullptr, 0));
}

// A hand-built block, independent of the numpy vectors: q4_0 with d = 0.5.
TEST(Dequantize, HandBuiltQ4_0) {
  quant::BlockQ4_0 blk{};
  blk.d = f32_to_fp16(0.5f);
  for (int j = 0; j < 16; ++j) blk.qs[j] = uint8_t(j | (15 - j) << 4);
  float out[32];
  dequantize_row(DType::Q4_0, &blk, out, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.5f * float(j - 8)) << j;
    EXPECT_EQ(out[16 + j], 0.5f * float(7 - j)) << j;
  }
}

// Every q8_0, q5_0, q4_K and q6_K tensor of the real model dequantizes to
// finite values (row by row, as the engine will use it).
TEST(DequantizeModel, QuantizedTensorsAreFinite) {
  WEIR_REQUIRE_MODEL(path);
  const GGUFFile f = GGUFFile::open(path);
  const DType wanted[] = {DType::Q8_0, DType::Q5_0, DType::Q4_K, DType::Q6_K};
  std::map<DType, int> seen;
  std::vector<float> row;
  for (const GGUFTensorInfo& ti : f.tensors()) {
    if (std::find(std::begin(wanted), std::end(wanted), ti.dtype) == std::end(wanted)) continue;
    ++seen[ti.dtype];
    const int64_t ne0 = ti.ne[0];
    const int64_t rows = ti.n_elements() / ne0;
    const size_t rb = row_bytes(ti.dtype, ne0);
    ASSERT_EQ(size_t(rows) * rb, ti.nbytes) << ti.name;
    row.resize(ne0);
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(ti.dtype, ti.data + r * rb, row.data(), ne0);
      for (int64_t i = 0; i < ne0; ++i) {
        if (!std::isfinite(row[i]) && bad++ == 0)
          ADD_FAILURE() << ti.name << " (" << dtype_name(ti.dtype) << "): row " << r << " element " << i
                        << " is " << row[i];
      }
    }
    EXPECT_EQ(bad, 0) << ti.name;
  }
  for (DType t : wanted) EXPECT_GT(seen[t], 0) << "model has no " << dtype_name(t) << " tensor";
}

}  // namespace
}  // namespace weir
