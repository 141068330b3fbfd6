#include "backend/cpu/membw.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include "backend/cpu/thread_pool.h"

namespace weir::cpu {
namespace {

__attribute__((target("avx2"))) uint64_t read_sum_avx2(const uint64_t* p, size_t n) {
  // Four independent accumulators keep several loads in flight.
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  uint64_t r = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; i < n; ++i) r += p[i];
  return r;
}

bool have_avx2() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return ok;
}

size_t parse_cache_size(const std::string& s) {
  // sysfs writes "32768K" or "32M".
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (end == s.c_str()) return 0;
  if (*end == 'K') return size_t(v) << 10;
  if (*end == 'M') return size_t(v) << 20;
  if (*end == 'G') return size_t(v) << 30;
  return size_t(v);
}

// The sums land here so the compiler cannot drop the loads that feed them.
std::atomic<uint64_t> g_sink{0};

}  // namespace

uint64_t read_sum_ref(const uint64_t* p, size_t n) {
  uint64_t r = 0;
  for (size_t i = 0; i < n; ++i) r += p[i];
  return r;
}

uint64_t read_sum(const uint64_t* p, size_t n) { return have_avx2() ? read_sum_avx2(p, n) : read_sum_ref(p, n); }

size_t last_level_cache_bytes() {
  size_t best = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
    std::string s;
    if (f >> s) best = std::max(best, parse_cache_size(s));
  }
  return best ? best : size_t(32) << 20;
}

ReadBandwidth measure_read_bandwidth(int n_threads, double min_seconds, size_t buffer_bytes) {
  using clock = std::chrono::steady_clock;
  const auto t_start = clock::now();
  if (buffer_bytes == 0)
    buffer_bytes = std::clamp(4 * last_level_cache_bytes(), size_t(256) << 20, size_t(1) << 30);
  const size_t n_words = buffer_bytes / sizeof(uint64_t);
  ThreadPool pool(n_threads);
  const int nt = pool.size();
  auto* buf = static_cast<uint64_t*>(::operator new(n_words * sizeof(uint64_t), std::align_val_t(64)));
  // Each thread touches (first-touch places pages near it) and then reads the
  // same share, as a decode step's threads read their rows.
  const auto share = [&](int ith, size_t* b, size_t* e) {
    const size_t per = (n_words / size_t(nt) + 7) / 8 * 8;  // whole cache lines
    *b = std::min(n_words, per * size_t(ith));
    *e = ith == nt - 1 ? n_words : std::min(n_words, *b + per);
  };
  pool.run([&](int ith) {
    size_t b, e;
    share(ith, &b, &e);
    for (size_t i = b; i < e; ++i) buf[i] = i * 0x9E3779B97F4A7C15ull;
  });
  ReadBandwidth r;
  r.n_threads = nt;
  r.buffer_bytes = n_words * sizeof(uint64_t);
  double best_s = 1e30, read_s = 0;
  std::vector<uint64_t> sums(static_cast<size_t>(nt), 0);
  while (r.passes < 3 || read_s < min_seconds) {
    const auto t0 = clock::now();
    pool.run([&](int ith) {
      size_t b, e;
      share(ith, &b, &e);
      sums[size_t(ith)] = read_sum(buf + b, e - b);
    });
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    for (uint64_t x : sums) g_sink.fetch_add(x, std::memory_order_relaxed);
    best_s = std::min(best_s, s);
    read_s += s;
    ++r.passes;
  }
  ::operator delete(buf, std::align_val_t(64));
  r.bytes_per_s = double(r.buffer_bytes) / best_s;
  r.seconds = std::chrono::duration<double>(clock::now() - t_start).count();
  return r;
}

}  // namespace weir::cpu
