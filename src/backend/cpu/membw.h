// The machine's memory read bandwidth, measured the way a decode step reads
// weights: every thread streams its share of a buffer much larger than the
// last-level cache. `weir bench` prints it next to the bandwidth a token
// generation run achieves, so a result shows its distance to the limit.
#pragma once
#include <cstddef>
#include <cstdint>

namespace weir::cpu {

struct ReadBandwidth {
  double bytes_per_s = 0;   // best pass
  size_t buffer_bytes = 0;  // bytes read per pass
  int n_threads = 0;
  int passes = 0;
  double seconds = 0;       // time spent, buffer setup included
};

// Streams a buffer of buffer_bytes (0: 4x the last-level cache, at least
// 256 MiB, at most 1 GiB) with n_threads threads until min_seconds of reading
// have passed (at least 3 passes); returns the fastest pass.
ReadBandwidth measure_read_bandwidth(int n_threads, double min_seconds = 0.3, size_t buffer_bytes = 0);

// Size of the largest CPU cache (sysfs), or 32 MiB when unknown.
size_t last_level_cache_bytes();

// The read kernel: the wrapping sum of n 64-bit words, so every word must be
// loaded. read_sum uses AVX2 loads when the CPU has them; read_sum_ref is
// its plain twin (tests compare them).
uint64_t read_sum(const uint64_t* p, size_t n);
uint64_t read_sum_ref(const uint64_t* p, size_t n);

}  // namespace weir::cpu
