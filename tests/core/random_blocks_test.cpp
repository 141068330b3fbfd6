// Random block data (weir synth's generators): for every type it produces,
// the values weir's reference dequantizer reads back have mean ~0 and the
// requested std, and the `gguf` Python package reads a file of them the same.
#include "core/quant/random_blocks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/gguf_writer.h"
#include "core/quant/block_formats.h"
#include "test_env.h"

namespace weir {
namespace {

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1,
                        DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q2_K, DType::Q3_K,
                        DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS,
                        DType::MXFP4};

struct Stats {
  double mean = 0, std = 0;
  size_t distinct = 0;
  bool finite = true;
};

Stats stats(const std::vector<float>& x) {
  Stats s;
  double sum = 0, sq = 0;
  std::set<float> seen;
  for (float v : x) {
    s.finite = s.finite && std::isfinite(v);
    sum += v;
    if (seen.size() < 1000) seen.insert(v);
  }
  s.mean = sum / double(x.size());
  for (float v : x) sq += (v - s.mean) * (v - s.mean);
  s.std = std::sqrt(sq / double(x.size()));
  s.distinct = seen.size();
  return s;
}

std::vector<float> generate(DType t, int64_t n, float mean, float std, uint64_t seed) {
  std::vector<uint8_t> raw(row_bytes(t, n));
  quant::random_fill(t, raw.data(), n, mean, std, seed);
  std::vector<float> x(static_cast<size_t>(n));
  dequantize_row(t, raw.data(), x.data(), n);
  return x;
}

TEST(RandomBlocks, MeanZeroAndTargetStdForEveryType) {
  const int64_t n = 256 * 1024;
  for (DType t : kTypes) {
    for (float target : {1.0f, 0.02f, 0.002f}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " std " + std::to_string(target));
      ASSERT_TRUE(quant::can_randomize(t));
      const Stats s = stats(generate(t, n, 0.0f, target, 7));
      EXPECT_TRUE(s.finite);
      EXPECT_LT(std::fabs(s.mean), 0.02 * target) << "mean " << s.mean;
      EXPECT_NEAR(s.std, target, 0.10 * target);
      // The spread should be much better than 10%: the scales are exact but for fp16 rounding.
      EXPECT_NEAR(s.std, target, 0.03 * target);
      EXPECT_GE(s.distinct, 8u) << "degenerate values";
    }
  }
}

TEST(RandomBlocks, FloatTypesTakeAMean) {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    const Stats s = stats(generate(t, 4096, 1.0f, 0.02f, 3));
    EXPECT_NEAR(s.mean, 1.0, 0.002) << dtype_name(t);
    EXPECT_NEAR(s.std, 0.02, 0.002) << dtype_name(t);
  }
  std::vector<uint8_t> raw(row_bytes(DType::Q4_K, 256));
  EXPECT_THROW(quant::random_fill(DType::Q4_K, raw.data(), 256, 1.0f, 0.1f, 1), Error);
  EXPECT_THROW(quant::random_fill(DType::Q4_K, raw.data(), 100, 0.0f, 0.1f, 1), Error);
  EXPECT_FALSE(quant::can_randomize(DType::Q8_K));
}

TEST(RandomBlocks, DeterministicPerSeed) {
  for (DType t : kTypes) {
    const int64_t n = 2048;
    std::vector<uint8_t> a(row_bytes(t, n)), b(a.size()), c(a.size());
    quant::random_fill(t, a.data(), n, 0.0f, 0.1f, 42);
    quant::random_fill(t, b.data(), n, 0.0f, 0.1f, 42);
    quant::random_fill(t, c.data(), n, 0.0f, 0.1f, 43);
    EXPECT_EQ(a, b) << dtype_name(t);
    EXPECT_NE(a, c) << dtype_name(t);
  }
}

// A scale field that the dequantizer reads wrongly (packing, sign, offset)
// shows up as a std or mean far off; here the raw sub-block scales of q4_K
// are checked to span their 6 bits, so the packed high bits are exercised.
TEST(RandomBlocks, KQuantScalesUseTheHighBits) {
  std::vector<uint8_t> raw(row_bytes(DType::Q4_K, 256 * 64));
  quant::random_fill(DType::Q4_K, raw.data(), 256 * 64, 0.0f, 0.1f, 5);
  std::set<int> scales;
  for (int b = 0; b < 64; ++b) {
    const uint8_t* s = raw.data() + b * 144 + 4;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, mn;
      quant::unpack_scale_min_k4(j, s, &sc, &mn);
      EXPECT_EQ(sc, mn);
      scales.insert(sc);
    }
  }
  EXPECT_EQ(*scales.begin(), 32);
  EXPECT_EQ(*scales.rbegin(), 63);
}

// The same data written to a GGUF file and read by the gguf Python package.
TEST(RandomBlocks, GgufPyReadsTheSameValues) {
  if (std::system("python3 -c 'import gguf, numpy' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 with the gguf package is not available";
  const std::string path = weir::test::own_dir() + "/random_blocks.gguf";
  const int64_t n = 256 * 64;
  const float target = 0.05f;
  std::map<std::string, Stats> ours;
  {
    GGUFWriter w;
    w.set_str("general.architecture", "test");
    for (DType t : kTypes) w.add_tensor(std::string("t_") + dtype_name(t), t, {256, n / 256});
    w.open(path);
    for (DType t : kTypes) {
      std::vector<uint8_t> raw(row_bytes(t, n));
      quant::random_fill(t, raw.data(), n, 0.0f, target, 11);
      std::vector<float> x(static_cast<size_t>(n));
      dequantize_row(t, raw.data(), x.data(), n);
      ours[std::string("t_") + dtype_name(t)] = stats(x);
      w.write_tensor_data(raw.data(), raw.size());
    }
    w.close();
  }
  const std::string cmd =
      "python3 -c 'import sys, gguf\n"
      "r = gguf.GGUFReader(sys.argv[1])\n"
      "for t in r.tensors:\n"
      "    d = gguf.quants.dequantize(t.data, t.tensor_type).astype(\"float64\")\n"
      "    print(t.name, d.size, repr(float(d.mean())), repr(float(d.std())))\n' " + path;
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t k;
  while ((k = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, k);
  ASSERT_EQ(pclose(p), 0) << out;
  std::istringstream in(out);
  std::string name;
  int64_t size;
  double mean, sd;
  size_t seen = 0;
  while (in >> name >> size >> mean >> sd) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(ours.count(name));
    EXPECT_EQ(size, n);
    EXPECT_NEAR(mean, ours[name].mean, 1e-6);
    EXPECT_NEAR(sd, ours[name].std, 1e-6 * target);
    EXPECT_LT(std::fabs(mean), 0.05 * target);
    EXPECT_NEAR(sd, target, 0.10 * target);
    ++seen;
  }
  EXPECT_EQ(seen, std::size(kTypes)) << out;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace weir
