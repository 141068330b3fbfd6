// Inputs of the CUDA sample op for its tests and micro-benchmarks: rows of
// logits of known shapes (spread, peaked, broad) and one sample node over
// device buffers.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "core/tensor.h"
#include "cuda_test_util.h"

namespace weir::cuda::test {

inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Params {
  float temp = 1, top_k = 0, top_p = 1, min_p = 0, u = 0.5f;
};
static_assert(sizeof(Params) == 5 * sizeof(float));

inline std::string str(const Params& p) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "temp %g top_k %g top_p %g min_p %g u %.9g", p.temp, p.top_k, p.top_p, p.min_p,
                p.u);
  return buf;
}

// Logits [V, n] with rows ld floats apart.
struct Logits {
  int64_t V = 0, n = 0, ld = 0;
  std::vector<float> v;
  Logits(int64_t V_, int64_t n_, int64_t ld_ = 0) : V(V_), n(n_), ld(ld_ ? ld_ : V_), v(size_t(ld * n), 0.0f) {}
  float* row(int64_t r) { return v.data() + r * ld; }
  const float* row(int64_t r) const { return v.data() + r * ld; }
};

// splitmix64: fast enough to fill 64 rows of 262144 logits in a blink.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }
};

// Distinct values: an evenly spread ladder with noise smaller than its step,
// rank i at id (a * i + b) mod V (a random affine permutation). shape(t),
// t in [0, 1) by rank, is increasing.
template <class Shape>
void fill_row(float* row, int64_t V, Rng& rng, Shape shape) {
  const uint64_t v = uint64_t(V);
  uint64_t a = 1 + rng.next() % v;
  while (std::gcd(a, v) != 1) ++a;
  const uint64_t b = rng.next() % v;
  for (uint64_t i = 0; i < v; ++i)
    row[(a * i + b) % v] = float(shape((double(i) + 0.5 + 0.6 * (rng.uniform() - 0.5)) / double(V)));
}
// Flat: evenly spread in [-10, 10].
inline void fill_spread(float* row, int64_t V, Rng& rng) {
  fill_row(row, V, rng, [](double t) { return -10.0 + 20.0 * t; });
}
// Peaked: a handful of tokens hold nearly all the mass (top-p 0.95: ~4).
inline void fill_peaked(float* row, int64_t V, Rng& rng) {
  fill_row(row, V, rng, [V](double t) {
    const double rank = (1.0 - t) * double(V);  // 0: the best
    return 18.0 * std::exp(-rank / 20.0) + 3.0 * t - 3.0;
  });
}
// Broad: 800 tokens on a slope hold nearly all the mass (top-p 0.95: ~400).
inline void fill_broad(float* row, int64_t V, Rng& rng) {
  fill_row(row, V, rng, [V](double t) {
    const double rank = (1.0 - t) * double(V);
    return rank < 800 ? 12.0 - 6.0 * rank / 800.0 : 3.0 * t - 6.0;
  });
}

inline Logits spread(int64_t V, int64_t n, uint64_t seed, int64_t ld = 0) {
  Logits l(V, n, ld);
  Rng rng{seed};
  for (int64_t r = 0; r < n; ++r) fill_spread(l.row(r), V, rng);
  return l;
}
inline Logits peaked(int64_t V, int64_t n, uint64_t seed) {
  Logits l(V, n);
  Rng rng{seed};
  for (int64_t r = 0; r < n; ++r) fill_peaked(l.row(r), V, rng);
  return l;
}
inline Logits broad(int64_t V, int64_t n, uint64_t seed) {
  Logits l(V, n);
  Rng rng{seed};
  for (int64_t r = 0; r < n; ++r) fill_broad(l.row(r), V, rng);
  return l;
}

// Tensors of one sample node over device buffers.
struct Node {
  DeviceBuffer dl, dp, dd, scratch;
  Tensor lg, pr, dst;
  Node(const Logits& l, const std::vector<Params>& p) {
    lg.dtype = DType::F32;
    lg.ne[0] = l.V;
    lg.ne[1] = l.n;
    set_contiguous_strides(lg);
    lg.nb[1] = size_t(l.ld) * sizeof(float);
    lg.nb[2] = lg.nb[3] = lg.nb[1] * size_t(l.n);
    lg.name = "logits";
    pr.dtype = DType::F32;
    pr.ne[0] = 5;
    pr.ne[1] = l.n;
    set_contiguous_strides(pr);
    pr.name = "params";
    dst.dtype = DType::I32;
    dst.ne[0] = l.n;
    set_contiguous_strides(dst);
    dst.op = Op::Sample;
    dst.src[0] = &lg;
    dst.src[1] = &pr;
    dst.name = "sample";
    dl = DeviceBuffer(l.v);
    dp = DeviceBuffer(p);
    dd = DeviceBuffer(size_t(l.n) * sizeof(int32_t));
    lg.data = dl.get();
    pr.data = dp.get();
    dst.data = dd.get();
    scratch = DeviceBuffer(sample_scratch_bytes(dst));
  }
  OpCtx ctx(cudaStream_t s = nullptr) const {
    OpCtx c;
    c.stream = s;
    c.scratch = scratch.get();
    c.scratch_bytes = scratch.size();
    return c;
  }
  std::vector<int32_t> run() {
    dd.fill(0x55);       // no valid token
    scratch.fill(0xFF);  // nothing may rely on zeroed scratch
    op_sample(dst, ctx());
    ok(cudaGetLastError(), "launch");
    ok(cudaDeviceSynchronize(), "sync");
    return dd.download<int32_t>();
  }
};

inline std::vector<int32_t> gpu_sample(const Logits& l, const std::vector<Params>& p) { return Node(l, p).run(); }

}  // namespace weir::cuda::test
