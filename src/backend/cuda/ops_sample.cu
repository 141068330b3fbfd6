// sample (core/graph.h) on the GPU: a token per row of logits, with the
// choices of the CPU reference weir::sample_row (backend/token_sampler.h)
// (backend/cpu/ops_sample.cpp): the same kept sets, the same draw order, float
// weights expf(l - max) / expf((l - max) * (1 / temperature)) summed in
// double. Results agree with the reference except within rounding at exact
// boundaries (CUDA's expf is within 2 ulp of glibc's; sums are taken in
// another order). The min-p threshold uses log in double rounded to float,
// which is what glibc's logf gives.
//
// One deviation: when top-p runs without top-k (top_k <= 0, top_k >= V, or
// top_k > 1024), the nucleus is searched among the 1024 most likely tokens
// only: the normalizer is the sum over the whole row (as the reference does
// when top-k is off; for top_k in (1024, V) the reference sums over the
// top-k set instead), and a nucleus that would be longer than 1024 tokens
// (after min-p) is cut at 1024. A nucleus of up to 1024 tokens is exact.
//
// Modes per row (the params are device data, so every kernel reads them and
// branches per row; see row_params):
//   greedy   temperature <= 0
//   topk     0 < top_k < V and top_k <= 1024 (any top-p / min-p)
//   cap      top-p with top-k off or > 1024 (the deviation above)
//   temp     neither top-k nor top-p: exact draw over the row in id order
//   largek   1024 < top_k < V without top-p: exact, but one block walks the
//            row ~12 times (slow path, a rare setting)
//
// Kernels (all on c.stream, no allocation, no synchronization):
//   1. chunk_kernel, grid (chunks of 8192 logits, rows), 512 threads: loads
//      its chunk once into shared memory as order-preserving keys; writes
//      the chunk's best (key, lowest id) to scratch; for topk/cap rows,
//      selects the chunk's top K by radix select in shared memory (over
//      the 64-bit composite key<<32 | ~id, so ties go to the lowest ids; an
//      11-bit first digit, then 8-bit digits; stops as soon as the boundary
//      bin is kept whole) and writes those K composites to scratch.
//   2. sum_kernel, same grid walked backwards (L2 still holds the end of
//      kernel 1's reads), 256 threads: temp rows: the chunk's sum of kept
//      weights (min-p applied, needs the row max from kernel 1); cap rows:
//      the chunk's sum of expf(l - max) (the top-p normalizer). Other rows
//      return at once.
//   3. row_kernel, one 1024-thread block per row: greedy: the best of the
//      chunk bests. topk/cap: the top K of the chunks' candidates (sorted
//      directly when there are <= 2048 of them, else a radix select over
//      them first), a bitonic sort by (logit desc, id asc), min-p, top-p
//      and the draw with block scans in double. temp: the chunk where the
//      cumulative weight passes u * total, then a block scan inside it.
//      largek: radix select of the k-th key over the row, then a weighted
//      radix select (bins of weight sums) for the draw in probability order.
// Scratch: per row and chunk, the best composite (u64) and a weight sum
// (double); per row, nchunks * min(V, 1024) candidate composites (u64).
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/plan/sample_rules.h"
#include "core/error.h"

namespace weir::cuda {
namespace {

using u64 = unsigned long long;

using sample::kChunk;  // logits per block of the chunk and sum kernels (plan/sample_rules.h)
using sample::kMaxK;   // largest top-k handled by the sort (and the cap)
constexpr int kChunkThreads = 512;  // chunk_kernel
constexpr int kSumThreads = 256;    // sum_kernel
constexpr int kRowThreads = 1024;   // row_kernel: one thread per sorted candidate
constexpr int kSortCap = 2048;      // candidates sorted directly, without a select
constexpr int kRowPer = kChunk / kRowThreads;
constexpr int kSelUnroll = 4;       // composites a thread loads at once in a select pass
constexpr int kFirstBits = 11;      // first radix digit: sign, exponent, 2 mantissa bits of the key
static_assert(kMaxK <= kRowThreads && kChunk % kRowThreads == 0 && kChunk % (4 * kChunkThreads) == 0 &&
              (1 << kFirstBits) % kRowThreads == 0 && (1 << kFirstBits) % kChunkThreads == 0 &&
              kChunk % (4 * kSumThreads) == 0);

enum Mode : int { kGreedy, kTemp, kTopK, kCap, kLargeK };

struct RowParams {
  float temp, top_p, min_p, u;
  int64_t k;      // top_k as the reference reads it (0 when off or out of range)
  bool topk_on;   // 0 < k < V: the reference runs top-k (and sorts)
  bool top_p_on;  // top_p < 1
  int mode;
  int K;  // topk/cap: how many candidates the sort keeps
};

__device__ RowParams row_params(const float* p, int64_t V) {
  RowParams r;
  r.temp = p[0];
  const float kf = p[1];
  r.top_p = p[2];
  r.min_p = p[3];
  r.u = p[4];
  r.k = (kf >= 1.0f && kf < 4.0e18f) ? int64_t(kf) : 0;  // int64_t(params[1]), truncating
  r.topk_on = r.k > 0 && r.k < V;
  r.top_p_on = r.top_p < 1.0f;
  r.K = 0;
  if (r.temp <= 0) {
    r.mode = kGreedy;
  } else if (r.topk_on && r.k <= kMaxK) {
    r.mode = kTopK;
    r.K = int(r.k);
  } else if (r.top_p_on) {
    r.mode = kCap;
    r.K = int(V < kMaxK ? V : kMaxK);
  } else if (r.topk_on) {
    r.mode = kLargeK;
  } else {
    r.mode = kTemp;
  }
  return r;
}

// Flat row r of a tensor (as the CPU's flat_row): i1, then i2, then i3.
struct RowAddr {
  const char* base;
  int64_t ne1, ne2;
  size_t nb1, nb2, nb3;
  __device__ const float* row(int64_t r) const {
    const int64_t i1 = r % ne1, i2 = (r / ne1) % ne2, i3 = r / (ne1 * ne2);
    return reinterpret_cast<const float*>(base + size_t(i1) * nb1 + size_t(i2) * nb2 + size_t(i3) * nb3);
  }
};

struct Work {
  u64* best;     // [n][nchunks]: max composite of the chunk
  double* sums;  // [n][nchunks]: kernel 2's weight sums
  u64* cand;     // [n][nchunks * cap]: chunk j's candidates at j * min(K, kChunk)
  int nchunks;
  int cap;
};

// NaN -> -inf, +inf -> FLT_MAX (as the reference).
__device__ __forceinline__ float sanitize(float v) {
  if (!(v <= FLT_MAX)) v = v != v ? -INFINITY : FLT_MAX;
  return v;
}
// Order-preserving key of a sanitized logit (-0 counts as +0: they tie).
__device__ __forceinline__ uint32_t key_of(float v) {
  const uint32_t b = __float_as_uint(v == 0.0f ? 0.0f : v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float logit_of(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}
constexpr uint32_t kKeyNegInf = 0x007FFFFFu;  // key_of(-inf)
// Composite: larger = earlier in probability order (higher logit, then lower id).
__device__ __forceinline__ u64 comp_of(uint32_t key, uint32_t id) { return (u64(key) << 32) | (0xFFFFFFFFu - id); }
__device__ __forceinline__ uint32_t id_of(u64 c) { return 0xFFFFFFFFu - uint32_t(c); }
__device__ __forceinline__ float min_p_log(float min_p) { return float(log(double(min_p))); }

struct MaxU64 {
  __device__ u64 operator()(u64 a, u64 b) const { return a > b ? a : b; }
};
struct MinU64 {
  __device__ u64 operator()(u64 a, u64 b) const { return a < b ? a : b; }
};
struct SumD {
  __device__ double operator()(double a, double b) const { return a + b; }
};

// All threads of the block call it; every thread gets the result. buf: 32 entries.
template <class T, class Op>
__device__ T block_reduce(T v, Op op, T identity, T* buf) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // buf may still be read by a previous call
  if (lane == 0) buf[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < nwarps ? buf[lane] : identity;
#pragma unroll
    for (int o = 16; o; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) buf[0] = v;
  }
  __syncthreads();
  return buf[0];
}

// Inclusive scan over the block in thread order; *total (if given) gets the
// block's sum. buf: 32 entries, read until the next call.
template <class T>
__device__ T block_scan(T v, T* buf, T* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T t = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += t;
  }
  __syncthreads();
  if (lane == 31) buf[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T s = lane < nwarps ? buf[lane] : T(0);
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const T t = __shfl_up_sync(0xffffffffu, s, o);
      if (lane >= o) s += t;
    }
    buf[lane] = s;
  }
  __syncthreads();
  if (warp > 0) v += buf[warp - 1];
  if (total) *total = buf[nwarps - 1];
  return v;
}

struct SelectSmem {
  unsigned hist[1 << kFirstBits];
  unsigned scan[32];
  u64 prefix;
  unsigned rem;
  int done;
};

// Radix select over `count` distinct composites comp(i), i in [0, count):
// returns T such that exactly K of them are >= T (1 <= K <= count). Digits
// from the top: kFirstBits, then 8 bits at a time; stops as soon as the
// boundary bin is kept whole. Counts go to shared memory with plain atomics,
// one per warp when the whole warp has the same digit (a constant or masked
// row). Block size: a multiple of 32, >= 256, dividing 1 << kFirstBits.
template <class Comp>
__device__ u64 block_select(const Comp& comp, uint32_t count, uint32_t K, SelectSmem& s) {
  constexpr unsigned kNone = ~0u;
  u64 prefix = 0;
  uint32_t rem = K;
  for (int hi_bit = 64; hi_bit > 0;) {  // bits >= hi_bit are fixed in prefix
    const int width = hi_bit == 64 ? kFirstBits : (hi_bit < 8 ? hi_bit : 8);
    const int shift = hi_bit - width;
    const unsigned nb = 1u << width;
    const u64 fixed = hi_bit == 64 ? 0ull : (~0ull << hi_bit);
    for (unsigned i = threadIdx.x; i < nb; i += blockDim.x) s.hist[i] = 0;
    __syncthreads();
    for (uint32_t b = 0; b < count; b += kSelUnroll * blockDim.x) {
      u64 c[kSelUnroll];  // loads first: several in flight per thread
#pragma unroll
      for (int q = 0; q < kSelUnroll; ++q) {
        const uint32_t i = b + q * blockDim.x + threadIdx.x;
        c[q] = i < count ? comp(i) : 0ull;
      }
#pragma unroll
      for (int q = 0; q < kSelUnroll; ++q) {
        const uint32_t i = b + q * blockDim.x + threadIdx.x;
        const unsigned d = (i < count && ((c[q] ^ prefix) & fixed) == 0) ? unsigned(c[q] >> shift) & (nb - 1) : kNone;
        if (!__any_sync(0xffffffffu, d != kNone)) continue;  // later digits: most warps count nothing
        const unsigned d0 = __shfl_sync(0xffffffffu, d, 0);
        if (__all_sync(0xffffffffu, d == d0)) {
          if ((threadIdx.x & 31) == 0) atomicAdd(&s.hist[d0], 32u);
        } else if (d != kNone) {
          atomicAdd(&s.hist[d], 1u);
        }
      }
    }
    __syncthreads();
    // Thread t owns `per` bins from the top (digit nb - 1 - t * per down);
    // the scan counts the composites above each thread's bins.
    const unsigned per = nb > blockDim.x ? nb / blockDim.x : 1u;
    const bool owner = threadIdx.x * per < nb;
    const int top = int(nb) - 1 - int(threadIdx.x * per);
    unsigned local = 0;
    if (owner)
      for (unsigned q = 0; q < per; ++q) local += s.hist[top - int(q)];
    const unsigned incl = block_scan<unsigned>(local, s.scan, nullptr);
    if (owner && incl >= rem && incl - local < rem) {
      unsigned acc = incl - local;
      for (unsigned q = 0; q < per; ++q) {
        const unsigned h = s.hist[top - int(q)];
        if (acc + h >= rem) {
          s.prefix = prefix | (u64(top - int(q)) << shift);
          s.rem = rem - acc;
          s.done = h == rem - acc;
          break;
        }
        acc += h;
      }
    }
    __syncthreads();
    prefix = s.prefix;
    rem = s.rem;
    const bool done = s.done;
    __syncthreads();
    if (done) break;
    hi_bit = shift;
  }
  return prefix;
}

__device__ __forceinline__ unsigned lanemask_lt() { return (1u << (threadIdx.x & 31)) - 1u; }

// Writes the composites comp(i) >= T to out (in no particular order).
template <class Comp>
__device__ void block_compact(const Comp& comp, uint32_t count, u64 T, u64* out, unsigned* counter) {
  if (threadIdx.x == 0) *counter = 0;
  __syncthreads();
  for (uint32_t b = 0; b < count; b += kSelUnroll * blockDim.x) {
    u64 c[kSelUnroll];
#pragma unroll
    for (int q = 0; q < kSelUnroll; ++q) {
      const uint32_t i = b + q * blockDim.x + threadIdx.x;
      c[q] = i < count ? comp(i) : 0ull;
    }
#pragma unroll
    for (int q = 0; q < kSelUnroll; ++q) {
      const uint32_t i = b + q * blockDim.x + threadIdx.x;
      const bool keep = i < count && c[q] >= T;
      const unsigned bal = __ballot_sync(0xffffffffu, keep);
      if (!bal) continue;
      unsigned off = 0;
      if ((threadIdx.x & 31) == 0) off = atomicAdd(counter, unsigned(__popc(bal)));
      off = __shfl_sync(0xffffffffu, off, 0);
      if (keep) out[off + __popc(bal & lanemask_lt())] = c[q];
    }
  }
  __syncthreads();
}

// Sorts a[0, P) descending; P a power of two.
__device__ void bitonic_desc(u64* a, int P) {
  for (int k = 2; k <= P; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < P; i += blockDim.x) {
        const int ixj = i ^ j;
        if (ixj > i) {
          const u64 x = a[i], y = a[ixj];
          if ((i & k) == 0 ? x < y : x > y) {
            a[i] = y;
            a[ixj] = x;
          }
        }
      }
      __syncthreads();
    }
}

__device__ __forceinline__ int pow2_at_least(int m) {
  int p = 1;
  while (p < m) p <<= 1;
  return p;
}

// ---- kernel 1: one chunk of a row ----
__global__ void __launch_bounds__(kChunkThreads) chunk_kernel(RowAddr logits, RowAddr params, int64_t V, Work w) {
  pdl_wait();
  __shared__ __align__(16) uint32_t keys[kChunk];
  __shared__ SelectSmem sel;
  __shared__ u64 red[32];
  __shared__ unsigned counter;
  const int64_t r = blockIdx.y;
  const int j = blockIdx.x;
  const int64_t base = int64_t(j) * kChunk;
  const int len = int(V - base < kChunk ? V - base : kChunk);
  const float* x = logits.row(r) + base;
  const RowParams p = row_params(params.row(r), V);

  u64 best = 0;
  if (len == kChunk && (reinterpret_cast<uintptr_t>(x) & 15) == 0) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    uint4* k4 = reinterpret_cast<uint4*>(keys);
    float4 v[kChunk / 4 / kChunkThreads];
#pragma unroll
    for (int t = 0; t < kChunk / 4 / kChunkThreads; ++t) v[t] = x4[t * kChunkThreads + threadIdx.x];
#pragma unroll
    for (int t = 0; t < kChunk / 4 / kChunkThreads; ++t) {
      const int q = t * kChunkThreads + threadIdx.x;
      const uint4 k = make_uint4(key_of(sanitize(v[t].x)), key_of(sanitize(v[t].y)), key_of(sanitize(v[t].z)),
                                 key_of(sanitize(v[t].w)));
      k4[q] = k;
      const uint32_t id = uint32_t(base) + 4u * uint32_t(q);
      best = max(best, max(max(comp_of(k.x, id), comp_of(k.y, id + 1)), max(comp_of(k.z, id + 2), comp_of(k.w, id + 3))));
    }
  } else {
    for (int i = threadIdx.x; i < len; i += kChunkThreads) {
      const uint32_t k = key_of(sanitize(x[i]));
      keys[i] = k;
      best = max(best, comp_of(k, uint32_t(base + i)));
    }
  }
  best = block_reduce(best, MaxU64(), 0ull, red);  // also makes keys visible
  if (threadIdx.x == 0) w.best[r * w.nchunks + j] = best;
  if (p.mode != kTopK && p.mode != kCap) return;

  const int kc = p.K < kChunk ? p.K : kChunk;
  u64* out = w.cand + r * int64_t(w.nchunks) * w.cap + int64_t(j) * kc;
  const uint32_t b32 = uint32_t(base);
  auto comp = [&](uint32_t i) { return comp_of(keys[i], b32 + i); };
  if (len <= p.K) {
    for (int i = threadIdx.x; i < len; i += kChunkThreads) out[i] = comp(uint32_t(i));
    return;
  }
  const u64 T = block_select(comp, uint32_t(len), uint32_t(p.K), sel);
  block_compact(comp, uint32_t(len), T, out, &counter);
}

// ---- kernel 2: weight sums of a chunk (temp and cap rows) ----
__global__ void __launch_bounds__(kSumThreads) sum_kernel(RowAddr logits, RowAddr params, int64_t V, Work w) {
  pdl_wait();
  __shared__ u64 redu[32];
  __shared__ double redd[32];
  // Backwards: the chunks kernel 1 read last are the likeliest still in L2.
  const int64_t r = gridDim.y - 1 - blockIdx.y;
  const int j = gridDim.x - 1 - blockIdx.x;
  const RowParams p = row_params(params.row(r), V);
  if (p.mode != kTemp && p.mode != kCap) return;
  u64 b = 0;
  for (int i = threadIdx.x; i < w.nchunks; i += blockDim.x) b = max(b, w.best[r * w.nchunks + i]);
  b = block_reduce(b, MaxU64(), 0ull, redu);
  const uint32_t mk = uint32_t(b >> 32);
  double s = 0;
  if (mk != kKeyNegInf) {
    const float M = logit_of(mk);
    float inv_t = 1.0f, thr = -INFINITY;  // cap: the normalizer, expf(l - max) over the row
    if (p.mode == kTemp) {
      inv_t = 1.0f / p.temp;
      if (p.min_p > 0) thr = M + min_p_log(p.min_p);
    }
    const int64_t base = int64_t(j) * kChunk;
    const int len = int(V - base < kChunk ? V - base : kChunk);
    const float* x = logits.row(r) + base;
    auto add = [&](float v) {
      const float l = sanitize(v);
      if (l >= thr) s += double(expf((l - M) * inv_t));
    };
    if (len == kChunk && (reinterpret_cast<uintptr_t>(x) & 15) == 0) {
      const float4* x4 = reinterpret_cast<const float4*>(x);
#pragma unroll 4
      for (int t = 0; t < kChunk / 4 / kSumThreads; ++t) {
        const float4 v = x4[t * kSumThreads + threadIdx.x];
        add(v.x), add(v.y), add(v.z), add(v.w);
      }
    } else {
      for (int i = threadIdx.x; i < len; i += blockDim.x) add(x[i]);
    }
  }
  s = block_reduce(s, SumD(), 0.0, redd);
  if (threadIdx.x == 0) w.sums[r * w.nchunks + j] = s;
}

// ---- kernel 3: one block per row ----
struct RowSmem {
  u64 sorted[kSortCap];
  SelectSmem sel;
  double wsum[256];
  unsigned wcnt[256];
  u64 wany[256];
  u64 ubuf[32];
  double dbuf[32];
  unsigned counter;
  int first, last, digit;
  double acc;
};

// temp rows: the draw over the row in id order, min-p applied.
__device__ __forceinline__ int64_t draw_temp(const float* x, int64_t V, const RowParams& p, float M, float thr,
                             const double* sums, int nchunks, RowSmem& s) {
  const float inv_t = 1.0f / p.temp;
  double sum = 0;
  for (int i = threadIdx.x; i < nchunks; i += blockDim.x) sum += sums[i];
  const double total = block_reduce(sum, SumD(), 0.0, s.dbuf);
  const double target = double(p.u) * total;
  // The first chunk whose cumulative weight passes the target.
  if (threadIdx.x == 0) s.first = INT_MAX, s.last = -1;
  double carry = 0;
  for (int b = 0; b < nchunks; b += blockDim.x) {
    const int j = b + threadIdx.x;
    const double v = j < nchunks ? sums[j] : 0.0;
    double tile;
    const double incl = block_scan(v, s.dbuf, &tile) + carry;
    if (j < nchunks && v > 0) {
      if (target < incl) atomicMin(&s.first, j);
      atomicMax(&s.last, j);
    }
    carry += tile;
    __syncthreads();
    if (s.first != INT_MAX) break;
  }
  __syncthreads();
  // Rounding left the target at the very end: the last positive weight.
  const bool fallback = s.first == INT_MAX;
  const int chunk = fallback ? s.last : s.first;
  if (chunk < 0) return -1;  // no positive weight (a NaN temperature)
  double before = 0;  // the weight of the chunks before this one
  for (int i = threadIdx.x; i < chunk; i += blockDim.x) before += sums[i];
  before = block_reduce(before, SumD(), 0.0, s.dbuf);
  const int64_t cbase = int64_t(chunk) * kChunk;
  const int len = int(V - cbase < kChunk ? V - cbase : kChunk);
  const int i0 = threadIdx.x * kRowPer;
  float wv[kRowPer];
  double local = 0;
#pragma unroll
  for (int q = 0; q < kRowPer; ++q) {
    float wq = 0;
    if (i0 + q < len) {
      const float l = sanitize(x[cbase + i0 + q]);
      if (l >= thr) wq = expf((l - M) * inv_t);
    }
    wv[q] = wq;
    local += double(wq);
  }
  double tot;
  double cum = before + block_scan(local, s.dbuf, &tot) - local;
  int first = INT_MAX, lastp = -1;
#pragma unroll
  for (int q = 0; q < kRowPer; ++q) {
    cum += double(wv[q]);
    if (wv[q] > 0) {
      lastp = i0 + q;
      if (first == INT_MAX && !fallback && target < cum) first = i0 + q;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) s.first = INT_MAX, s.last = -1;
  __syncthreads();
  if (first != INT_MAX) atomicMin(&s.first, first);
  if (lastp >= 0) atomicMax(&s.last, lastp);
  __syncthreads();
  const int idx = s.first != INT_MAX ? s.first : s.last;
  return idx < 0 ? -1 : cbase + idx;
}

// topk and cap rows: the top K candidates, sorted; min-p, top-p, the draw.
__device__ __forceinline__ int64_t draw_sorted(int64_t V, const RowParams& p, float M, float thr, const u64* cand,
                               const double* sums, int nchunks, RowSmem& s) {
  const int K = p.K;
  const int kc = K < kChunk ? K : kChunk;
  const int64_t last_len = V - int64_t(nchunks - 1) * kChunk;
  const uint32_t m = uint32_t(int64_t(nchunks - 1) * kc + (last_len < K ? last_len : K));
  int P;
  if (m <= uint32_t(kSortCap)) {
    P = pow2_at_least(int(m));
    for (int i = threadIdx.x; i < P; i += blockDim.x) s.sorted[i] = uint32_t(i) < m ? cand[i] : 0ull;
  } else {
    auto comp = [&](uint32_t i) { return cand[i]; };
    const u64 T = block_select(comp, m, uint32_t(K), s.sel);
    block_compact(comp, m, T, s.sorted, &s.counter);
    P = pow2_at_least(K);
    for (int i = K + threadIdx.x; i < P; i += blockDim.x) s.sorted[i] = 0ull;
  }
  __syncthreads();
  bitonic_desc(s.sorted, P);

  const int i = threadIdx.x;
  const bool in = i < K;
  const u64 c = in ? s.sorted[i] : 0ull;
  const float l = in ? logit_of(uint32_t(c >> 32)) : -INFINITY;
  const bool kept = in && (p.min_p > 0 ? l >= thr : true);
  int n = __syncthreads_count(kept);  // sorted, so the kept ones are a prefix
  if (p.top_p_on) {
    double norm;
    if (p.mode == kTopK) {  // over the top-k set, before min-p
      norm = block_reduce(in ? double(expf(l - M)) : 0.0, SumD(), 0.0, s.dbuf);
    } else {  // over the row (kernel 2)
      double sum = 0;
      for (int j = threadIdx.x; j < nchunks; j += blockDim.x) sum += sums[j];
      norm = block_reduce(sum, SumD(), 0.0, s.dbuf);
    }
    const double pi = kept ? double(expf(l - M)) / norm : 0.0;
    const double cum = block_scan(pi, s.dbuf, static_cast<double*>(nullptr));
    if (threadIdx.x == 0) s.first = INT_MAX;
    __syncthreads();
    if (kept && cum >= double(p.top_p)) atomicMin(&s.first, i);
    __syncthreads();
    if (s.first != INT_MAX) n = s.first + 1;
  }
  const bool dr = i < n;
  const float inv_t = 1.0f / p.temp;
  const float wt = dr ? expf((l - M) * inv_t) : 0.0f;
  double total;
  const double cum = block_scan(double(wt), s.dbuf, &total);
  const double target = double(p.u) * total;
  __syncthreads();
  if (threadIdx.x == 0) s.first = INT_MAX, s.last = -1;
  __syncthreads();
  if (dr && wt > 0) {
    if (target < cum) atomicMin(&s.first, i);
    atomicMax(&s.last, i);
  }
  __syncthreads();
  int idx = s.first != INT_MAX ? s.first : s.last;
  if (idx < 0) idx = 0;
  return int64_t(id_of(s.sorted[idx]));
}

// largek rows (1024 < top_k < V, no top-p): exact, one block over the row.
__device__ __forceinline__ int64_t draw_large(const float* x, int64_t V, const RowParams& p, float M, float thr, RowSmem& s) {
  auto comp = [&](uint32_t i) { return comp_of(key_of(sanitize(x[i])), i); };
  const uint32_t count = uint32_t(V);
  const u64 T = block_select(comp, count, uint32_t(p.k), s.sel);
  const float inv_t = 1.0f / p.temp;
  // Total kept weight, and the last positive one in probability order.
  double sum = 0;
  u64 lastc = ~0ull;
  for (uint32_t i = threadIdx.x; i < count; i += blockDim.x) {
    const float l = sanitize(x[i]);
    const u64 c = comp_of(key_of(l), i);
    if (c >= T && l >= thr) {
      const float wq = expf((l - M) * inv_t);
      sum += double(wq);
      if (wq > 0 && c < lastc) lastc = c;
    }
  }
  const double total = block_reduce(sum, SumD(), 0.0, s.dbuf);
  lastc = block_reduce(lastc, MinU64(), ~0ull, s.ubuf);
  const double target = double(p.u) * total;
  // Weighted radix select: the first composite (descending) where the
  // cumulative weight passes the target.
  u64 prefix = 0, answer = lastc;
  double acc = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    const u64 hi = shift == 56 ? 0ull : (~0ull << (shift + 8));
    for (int d = threadIdx.x; d < 256; d += blockDim.x) s.wsum[d] = 0, s.wcnt[d] = 0, s.wany[d] = 0;
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < count; i += blockDim.x) {
      const float l = sanitize(x[i]);
      const u64 c = comp_of(key_of(l), i);
      if (c >= T && l >= thr && ((c ^ prefix) & hi) == 0) {
        const unsigned d = unsigned(c >> shift) & 255u;
        atomicAdd(&s.wsum[d], double(expf((l - M) * inv_t)));
        atomicAdd(&s.wcnt[d], 1u);
        atomicMax(&s.wany[d], c);
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int chosen = -1;
      double a = acc;
      for (int d = 255; d >= 0; --d) {
        if (s.wsum[d] > 0 && target < a + s.wsum[d]) {
          chosen = d;
          break;
        }
        a += s.wsum[d];
      }
      s.digit = chosen;
      s.acc = a;
    }
    __syncthreads();
    const int d = s.digit;
    if (d < 0) {  // rounding left the target at the very end: the last positive weight
      answer = lastc;
      break;
    }
    acc = s.acc;
    prefix |= u64(d) << shift;
    const bool single = s.wcnt[d] == 1;  // one composite left: that one
    answer = single ? s.wany[d] : prefix;  // after the last digit, prefix is the composite
    __syncthreads();
    if (single) break;
  }
  return answer == ~0ull ? -1 : int64_t(id_of(answer));
}

__global__ void __launch_bounds__(kRowThreads, 1) row_kernel(RowAddr logits, RowAddr params, int64_t V, Work w,
                                                          int32_t* dst) {
  pdl_wait();
  __shared__ RowSmem s;
  const int64_t r = blockIdx.x;
  const RowParams p = row_params(params.row(r), V);
  const u64* best_row = w.best + r * w.nchunks;
  u64 b = 0;
  for (int i = threadIdx.x; i < w.nchunks; i += blockDim.x) b = max(b, best_row[i]);
  b = block_reduce(b, MaxU64(), 0ull, s.ubuf);
  const uint32_t mk = uint32_t(b >> 32);
  if (mk == kKeyNegInf || p.mode == kGreedy) {  // all -inf/NaN: -1; greedy: lowest id of the max
    if (threadIdx.x == 0) dst[r] = mk == kKeyNegInf ? -1 : int32_t(id_of(b));
    return;
  }
  const float M = logit_of(mk);
  float thr = -INFINITY;
  if (p.min_p > 0) {
    thr = M + min_p_log(p.min_p);
    if (!(M >= thr)) {  // min-p keeps nothing: the reference returns its c[0]
      if (threadIdx.x == 0) dst[r] = p.topk_on ? int32_t(id_of(b)) : 0;
      return;
    }
  }
  const float* x = logits.row(r);
  int64_t tok;
  switch (p.mode) {
    case kTemp:
      tok = draw_temp(x, V, p, M, thr, w.sums + r * w.nchunks, w.nchunks, s);
      break;
    case kLargeK:
      tok = draw_large(x, V, p, M, thr, s);
      break;
    default:
      tok = draw_sorted(V, p, M, thr, w.cand + r * int64_t(w.nchunks) * w.cap, w.sums + r * w.nchunks, w.nchunks, s);
      break;
  }
  if (threadIdx.x == 0) dst[r] = int32_t(tok);
}

// ---- allow_tokens: logits where the bitmask allows, else -inf ----
__global__ void allow_kernel(RowAddr logits, const uint32_t* allow, int64_t words, int64_t V, float* dst) {
  pdl_wait();
  const int64_t r = blockIdx.y;
  const int64_t v = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= V) return;
  const bool on = (allow[r * words + (v >> 5)] >> (v & 31)) & 1u;
  dst[r * V + v] = on ? logits.row(r)[v] : -INFINITY;
}

// ---- host side ----
RowAddr row_addr_of(const Tensor& t) {
  return RowAddr{static_cast<const char*>(t.data), t.ne[1], t.ne[2], t.nb[1], t.nb[2], t.nb[3]};
}

}  // namespace

void op_allow_tokens(const Tensor& dst, const OpCtx& c) {
  const Tensor& lg = *dst.src[0];
  const Tensor& al = *dst.src[1];
  const int64_t V = lg.ne[0], n = lg.n_rows();
  if (lg.dtype != DType::F32 || al.dtype != DType::I32 || al.ne[0] != (V + 31) / 32 || lg.nb[0] != sizeof(float) ||
      dst.nb[0] != sizeof(float) || dst.nb[1] != size_t(V) * sizeof(float) || al.nb[1] != size_t(al.ne[0]) * 4 ||
      al.n_rows() != n)
    throw Error("allow_tokens: " + dst.name + ": needs F32 logits [V, n], I32 allow [(V + 31) / 32, n] (contiguous)");
  if (V == 0 || n == 0) return;
  const unsigned threads = 256;
  const dim3 grid(unsigned((V + threads - 1) / threads), unsigned(n));
  launch_kernel(allow_kernel, grid, threads, 0, c.launch_stream(), row_addr_of(lg),
                static_cast<const uint32_t*>(al.data), al.ne[0], V, static_cast<float*>(dst.data));
  WEIR_CUDA_CHECK_LAUNCH();
}

void op_sample(const Tensor& dst, const OpCtx& c) {
  const sample::Plan pl = sample::plan_of(dst);
  if (pl.n == 0) return;
  const Tensor& lg = *dst.src[0];
  const Tensor& pr = *dst.src[1];
  if (!dst.data || !pr.data || (pl.V > 0 && !lg.data))
    throw Error("sample: " + dst.name + ": operand without device memory");
  if (pl.V == 0) {  // nothing to pick: -1 per row
    WEIR_CUDA_CHECK(cudaMemsetAsync(dst.data, 0xFF, size_t(pl.n) * sizeof(int32_t), c.stream));
    return;
  }
  if (!c.scratch || c.scratch_bytes < pl.bytes)
    throw Error("sample: " + dst.name + ": needs " + std::to_string(pl.bytes) + " bytes of scratch, got " +
                std::to_string(c.scratch ? c.scratch_bytes : 0));
  char* sc = static_cast<char*>(c.scratch);
  const Work w{reinterpret_cast<u64*>(sc), reinterpret_cast<double*>(sc + pl.off_sums),
               reinterpret_cast<u64*>(sc + pl.off_cand), pl.nchunks, pl.cap};
  const RowAddr lr = row_addr_of(lg), prr = row_addr_of(pr);
  const dim3 grid(unsigned(pl.nchunks), unsigned(pl.n));
  launch_kernel(chunk_kernel, grid, kChunkThreads, 0, c.launch_stream(), lr, prr, pl.V, w);
  WEIR_CUDA_CHECK_LAUNCH();
  launch_kernel(sum_kernel, grid, kSumThreads, 0, c.launch_stream(), lr, prr, pl.V, w);
  WEIR_CUDA_CHECK_LAUNCH();
  launch_kernel(row_kernel, unsigned(pl.n), kRowThreads, 0, c.launch_stream(), lr, prr, pl.V, w,
                static_cast<int32_t*>(dst.data));
  WEIR_CUDA_CHECK_LAUNCH();
}

}  // namespace weir::cuda
