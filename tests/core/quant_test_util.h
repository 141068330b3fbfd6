// Shared helpers of the quantizer tests: deterministic data (the same on
// every standard library) and round-trip error measures.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/quant/quantize.h"

namespace weir::test {

// xorshift64*: uniform in [0, 1) and standard normal (Box-Muller).
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }
  double normal() {
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

inline std::vector<float> normal_data(size_t n, double sigma, uint64_t seed) {
  Rng r(seed);
  std::vector<float> x(n);
  for (float& v : x) v = float(sigma * r.normal());
  return x;
}

// quantize_rows then dequantize_row, rows of n_per_row.
inline std::vector<float> round_trip(DType t, const std::vector<float>& x, int64_t n_per_row) {
  const int64_t rows = int64_t(x.size()) / n_per_row;
  std::vector<uint8_t> q(size_t(rows) * row_bytes(t, n_per_row));
  quant::quantize_rows(t, x.data(), q.data(), rows, n_per_row);
  std::vector<float> y(x.size());
  dequantize_row(t, q.data(), y.data(), int64_t(x.size()));
  return y;
}

inline double sum_sq_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - double(b[i]);
    s += d * d;
  }
  return s;
}

inline double rms_diff(const std::vector<float>& a, const std::vector<float>& b) {
  return a.empty() ? 0.0 : std::sqrt(sum_sq_diff(a, b) / double(a.size()));
}

inline double rms(const std::vector<float>& a) {
  return rms_diff(a, std::vector<float>(a.size(), 0.0f));
}

inline bool all_finite(const std::vector<float>& a) {
  for (float v : a)
    if (!std::isfinite(v)) return false;
  return true;
}

}  // namespace weir::test
