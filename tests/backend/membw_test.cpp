// The memory read bandwidth probe: the AVX2 read kernel against its plain
// twin on odd sizes and unaligned starts, and a short measurement.
#include "backend/cpu/membw.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace weir::cpu {
namespace {

TEST(MemBandwidth, ReadSumMatchesReference) {
  std::mt19937_64 rng(7);
  std::vector<uint64_t> v(4099);
  for (auto& x : v) x = rng();
  for (size_t off : {0, 1, 3})
    for (size_t n : {0, 1, 15, 16, 17, 63, 1000, 4093}) {
      SCOPED_TRACE(n);
      EXPECT_EQ(read_sum(v.data() + off, n), read_sum_ref(v.data() + off, n));
    }
  // The reference is a plain wrapping sum.
  const uint64_t big[3] = {~0ull, 2, 5};
  EXPECT_EQ(read_sum_ref(big, 3), 6u);
  EXPECT_EQ(read_sum(big, 3), 6u);
}

TEST(MemBandwidth, ShortMeasurement) {
  const ReadBandwidth r = measure_read_bandwidth(2, 0.01, size_t(8) << 20);
  EXPECT_EQ(r.n_threads, 2);
  EXPECT_EQ(r.buffer_bytes, size_t(8) << 20);
  EXPECT_GE(r.passes, 3);
  EXPECT_GT(r.bytes_per_s, 1e8);   // any machine streams more than 100 MB/s
  EXPECT_LT(r.bytes_per_s, 1e13);  // and less than 10 TB/s: the loads were not skipped
  EXPECT_GE(last_level_cache_bytes(), size_t(1) << 16);
}

}  // namespace
}  // namespace weir::cpu
