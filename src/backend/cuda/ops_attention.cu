// attention (core/graph.h) on the GPU: q F32 [D, Hq, T], k and v F16 or F32
// [D, Hkv, S] (KV cache views), mask F32 [S, T] of 0 / -inf, scale; output
// F32 [D*Hq, T]. Same semantics as the CPU reference (backend/cpu/
// ops_attention.cpp): s_j = q.k_j * scale + mask_j, softmax over the keys
// that are not masked, out = sum_j p_j v_j; a row with every key masked is 0.
//
// Rows. For kv head g, the query rows (t, h) with h in g's group (G = Hq/Hkv
// heads) are numbered r = t * G + (h - g * G); a block takes consecutive rows,
// so the heads that share a kv head, and consecutive tokens, read each K/V row
// once. Scores are kept in log2 units (q is scaled by scale * log2(e)).
//
// Two kernels, both splitting the keys across blocks (flash-decoding) when the
// (row block, kv head) pairs alone do not fill the GPU; each split leaves an
// unnormalized output with its running (max, sum), and attn_combine merges
// them. With one split the kernel writes the normalized output itself.
//
// - attn_vec (CUDA cores; decode, F32 caches, any D that is a multiple of 8,
//   and batched decode, where each token is of another sequence: graph.h's
//   separate_tokens hint): R <= 8 rows per block, 128 threads; with the
//   hint, a block's rows are of one token, so it reads only that token's
//   span of keys (the KV cache keeps a sequence's cells together), found
//   by the attn_ranges pre-pass rather than each block scanning the mask. A key row is read by L lanes (8
//   elements = one 16-byte F16 load each); every thread holds its 8 dims of q
//   for the R rows, so a key group computes R partial dots, reduced across
//   its L lanes by a transposing butterfly (R - 1 + log2(L/R) shuffles for R
//   sums). The same threads then accumulate p * v for their 8 dims of R rows;
//   the key groups' accumulators are summed in shared memory at the end. The
//   block first scans its tokens' mask over its key range and visits only
//   [first, last] unmasked key; K and V of a tile are loaded together.
//   Decode splits are strided: split s takes key tiles s, s + n, s + 2n, ...
//   (skipping those with no key to see), so a sliding window deep in the
//   cache is spread over many splits. Short spans take one split of a
//   block a query head (256 threads; 512 for 256-dim heads) and no merge.
// - attn_dec (tensor cores; decode over long spans, F16 caches, D in {64,
//   128, 256}, blocks of 8 rows): each warp takes 16 keys of a tile, S = Q K^T
//   and O^T += V^T P^T by mma, tiles double-buffered by cp.async, the warps
//   merged at the end; strided splits as attn_vec's (the kernel's comment).
// - attn_mma (tensor cores; F16 caches, D in {64, 128, 256}, more than 8 rows
//   per kv head): FlashAttention-2 style. 64 rows per block (4 warps x 16
//   rows), key tiles of 64 (32 for D = 256) double-buffered in shared memory
//   by cp.async, S = Q K^T and O += P V by mma.sync m16n8k16 (f16 in, f32
//   accumulate). A pre-pass (attn_ranges) finds each token's first and last
//   unmasked key; a block visits only the key tiles between its tokens'
//   extremes (causal and sliding-window masks skip the rest), split evenly
//   across its splits.
//
// Masked scores are set to -inf by a select (never computed as dot + -inf),
// so finite garbage in masked K/V cells cannot produce NaN.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/mul_mat_q8.h"
#include "backend/cuda/q8_act.cuh"
#include "core/error.h"

namespace weir::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kThreads = 128;                          // both kernels
constexpr int kMaxSplits = 128;                        // attn_combine keeps the split weights in shared memory
constexpr int kMinSplitKeys = 64;                      // keys per split at least
constexpr int kMaxSms = 160;                           // splits are planned for at most this many SMs (scratch bound)
constexpr size_t kMaxPartialBytes = size_t(16) << 20;  // cap on split partials
constexpr int kRangeChunk = 4096;                      // keys per attn_ranges block
constexpr int kBM = 64;                                // attn_mma rows per block
constexpr int kVecMaxRows = 8;                         // attn_vec rows per block, and the mma threshold
constexpr int kWideThreads = 256;                      // attn_vec for one split over a short span, a head a block
constexpr int kWiderThreads = 512;                     // the same for 256-dim heads (a warp a key: attn_wide 3)
constexpr int kDecRows = 8;                            // attn_dec: query rows per block (the mma's n8)

struct Params {
  const float* q;
  int64_t q_nb1, q_nb2;  // floats
  const char* k;
  const char* v;
  int64_t k_nb1, k_nb2, v_nb1, v_nb2;  // bytes
  const float* mask;
  int64_t m_nb1;  // floats
  float* out;
  int64_t o_nb1;       // floats
  float* part_o;       // [split][t][h][D], unnormalized
  float2* part_ml;     // [split][t][h]: (max, sum), log2 units
  const int2* ranges;  // attn_mma, separate attn_vec: [t][chunk] (first, last + 1) unmasked key
  int n_rchunks;
  int D, Hq, G, T, S, rows;  // rows = T * G per kv head
  float qscale;              // scale * log2(e)
  int splits, chunk;         // attn_vec: keys per split (a multiple of its tile)
  bool strided;              // attn_vec: split s takes tiles s, s + splits, ... of the keys (chunk = S)
  bool q16, kv16;            // q rows / K and V rows 16-byte aligned
  bool mask_early;           // attn_vec: no kernel of the graph writes the mask (scanned before pdl_wait())
  Q8Act q8;                  // the output also as 8-bit blocks (attn_combine, attn_vec or attn_dec with one split)
};

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float2 h2_to_f2(uint32_t u) { return __half22float2(*reinterpret_cast<const __half2*>(&u)); }

__device__ __forceinline__ uint32_t pack_h2(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// 8 consecutive elements of a K or V row.
template <typename KV>
struct Row8;

template <>
struct Row8<__half> {
  uint4 r;
  __device__ __forceinline__ void zero() { r = make_uint4(0, 0, 0, 0); }
  __device__ __forceinline__ void load(const char* p, bool aligned) {
    if (aligned) {
      r = __ldg(reinterpret_cast<const uint4*>(p));
    } else {
      const unsigned short* s = reinterpret_cast<const unsigned short*>(p);
      r.x = uint32_t(__ldg(s + 0)) | uint32_t(__ldg(s + 1)) << 16;
      r.y = uint32_t(__ldg(s + 2)) | uint32_t(__ldg(s + 3)) << 16;
      r.z = uint32_t(__ldg(s + 4)) | uint32_t(__ldg(s + 5)) << 16;
      r.w = uint32_t(__ldg(s + 6)) | uint32_t(__ldg(s + 7)) << 16;
    }
  }
  __device__ __forceinline__ void get(float (&f)[8]) const {
    float2 a = h2_to_f2(r.x), b = h2_to_f2(r.y), c = h2_to_f2(r.z), d = h2_to_f2(r.w);
    f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y, f[4] = c.x, f[5] = c.y, f[6] = d.x, f[7] = d.y;
  }
};

template <>
struct Row8<float> {
  float4 a, b;
  __device__ __forceinline__ void zero() { a = b = make_float4(0.f, 0.f, 0.f, 0.f); }
  __device__ __forceinline__ void load(const char* p, bool aligned) {
    const float* f = reinterpret_cast<const float*>(p);
    if (aligned) {
      a = __ldg(reinterpret_cast<const float4*>(f));
      b = __ldg(reinterpret_cast<const float4*>(f) + 1);
    } else {
      a = make_float4(__ldg(f + 0), __ldg(f + 1), __ldg(f + 2), __ldg(f + 3));
      b = make_float4(__ldg(f + 4), __ldg(f + 5), __ldg(f + 6), __ldg(f + 7));
    }
  }
  __device__ __forceinline__ void get(float (&f)[8]) const {
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  }
};

// Sums v[0..N) of each lane across the L lanes of its group, N values at once:
// halving stages (offsets O, 2O, ...) each send half the values, so after
// log2(N) stages a lane holds one sum, then plain butterflies over the rest
// of the group. The lane ends with row row_of<N>(lane) in v[0].
template <int N, int O, int L>
struct Butterfly {
  __device__ __forceinline__ static void run(float (&v)[kVecMaxRows], int lane) {
    const bool up = (lane & O) != 0;
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      const float send = up ? v[i] : v[i + N / 2];
      const float keep = up ? v[i + N / 2] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
    }
    Butterfly<N / 2, O * 2, L>::run(v, lane);
  }
};
template <int O, int L>
struct Butterfly<1, O, L> {
  __device__ __forceinline__ static void run(float (&v)[kVecMaxRows], int) {
#pragma unroll
    for (int o = O; o < L; o <<= 1) v[0] += __shfl_xor_sync(0xffffffffu, v[0], o);
  }
};
// The row whose sum lane c (in its group) holds after Butterfly<R, 1, L>.
template <int R>
__device__ __forceinline__ int row_of(int c) {
  int r = 0;
#pragma unroll
  for (int s = 0, n = R; n > 1; ++s, n >>= 1) r += ((c >> s) & 1) * (n / 2);
  return r;
}

// ---------------------------------------------------------------------------
// attn_vec: grid (row blocks of R, Hkv, splits), TH threads (128; 256 for
// one split over a short span: plan_vec).
template <int L, int R, typename KV, int TH>
__global__ void __launch_bounds__(TH) attn_vec(const Params p) {
  constexpr int NKG = TH / L;                                        // key groups
  constexpr int KPT = (sizeof(KV) == 2 ? 8 : 4) / (R == 8 ? 2 : 1);  // keys per thread per tile
  constexpr int TK = NKG * KPT;                                      // keys per tile
  constexpr int DL = L * 8;                                          // dims covered by a key group
  constexpr int SC = R * TK, RED = NKG * R * DL;
  constexpr int NPL = (TK + 31) / 32;  // scores per lane in the softmax
  __shared__ __align__(16) float sh[SC > RED ? SC : RED];
  __shared__ float m_s[R], l_s[R], al_s[R];
  __shared__ int lohi[2];
  __shared__ unsigned tile_bits;  // strided: owned tile u (< 32) has an unmasked key

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int c = tid % L, kg = tid / L;
  const int g = blockIdx.y, split = blockIdx.z;
  const int G = p.G, D = p.D, dc = D / 8;
  const int row0 = blockIdx.x * R;
  const int nr = min(R, p.rows - row0);
  const int t_first = row0 / G, t_last = (row0 + nr - 1) / G;

  if (tid < R) m_s[tid] = -INFINITY, l_s[tid] = 0.f, al_s[tid] = 1.f;
  if (tid == 0) lohi[0] = INT_MAX, lohi[1] = -1, tile_bits = 0;

  // The unmasked extent [klo, khi) of this split's keys for the block's
  // tokens: from attn_ranges' per-token spans, or by scanning the mask,
  // which is done before pdl_wait() where no kernel writes the mask (a
  // dependent round trip less after the kernel ahead ends). Strided splits
  // (a sliding window deep in the cache falls on many splits, not on the
  // one or two whose chunk holds it) scan their own tiles and note which
  // have a key to see.
  const int kb = p.strided ? 0 : split * p.chunk, ke = p.strided ? p.S : min(p.S, kb + p.chunk);
  const auto find_extent = [&] {
    int lo = INT_MAX, hi = -1;
    if (p.strided) {
      for (int j = split, u = 0; j * TK < p.S; j += p.splits, ++u) {
        const int k0 = j * TK, k1 = min(p.S, k0 + TK);
        bool any = false;
        for (int t = t_first; t <= t_last; ++t) {
          const float* mr = p.mask + t * p.m_nb1;
          for (int x = k0 + tid; x < k1; x += TH)
            if (__ldg(mr + x) != -INFINITY) lo = min(lo, x), hi = max(hi, x), any = true;
        }
        if (__any_sync(0xffffffffu, any) && lane == 0 && u < 32) atomicOr(&tile_bits, 1u << u);
      }
    } else if (p.ranges) {  // from attn_ranges' per-token spans, clipped to the split
      const int n = (t_last - t_first + 1) * p.n_rchunks;
      for (int i = tid; i < n; i += TH) {
        const int2 x = p.ranges[int64_t(t_first) * p.n_rchunks + i];
        const int a = max(x.x, kb), b = min(x.y, ke) - 1;
        if (a <= b) lo = min(lo, a), hi = max(hi, b);
      }
    } else {
      for (int t = t_first; t <= t_last; ++t) {
        const float* mr = p.mask + t * p.m_nb1;
#pragma unroll 4
        for (int j = kb + tid; j < ke; j += TH)
          if (__ldg(mr + j) != -INFINITY) lo = min(lo, j), hi = max(hi, j);
      }
    }
    lo = __reduce_min_sync(0xffffffffu, lo);
    hi = __reduce_max_sync(0xffffffffu, hi);
    if (lane == 0) atomicMin(&lohi[0], lo), atomicMax(&lohi[1], hi);
  };
  const bool early = p.mask_early && !p.ranges;
  if (early) {
    __syncthreads();  // lohi initialized
    find_extent();
  }
  pdl_wait();

  // This lane's 8 dims of q for every row, scaled.
  float q[R][8];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int e = 0; e < 8; ++e) q[r][e] = 0.f;
    if (r < nr && c < dc) {
      const int row = row0 + r, t = row / G, h = g * G + row % G;
      const float* qp = p.q + t * p.q_nb2 + h * p.q_nb1 + c * 8;
      if (p.q16) {
        const float4 a = *reinterpret_cast<const float4*>(qp), b = *reinterpret_cast<const float4*>(qp + 4);
        q[r][0] = a.x, q[r][1] = a.y, q[r][2] = a.z, q[r][3] = a.w;
        q[r][4] = b.x, q[r][5] = b.y, q[r][6] = b.z, q[r][7] = b.w;
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) q[r][e] = qp[e];
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) q[r][e] *= p.qscale;
    }
  }

  // With attn_ranges' spans the keys are read a range chunk at a time, each
  // chunk from its first unmasked key to its last (for the block's tokens):
  // a sequence whose cells lie in two places (a shared prefix, its own run)
  // reads those two, not the cache between them. Else one extent.
  const bool segmented = p.ranges != nullptr;
  if (!early && !segmented) {
    __syncthreads();  // lohi initialized
    find_extent();
  }
  __syncthreads();
  int klo = lohi[0], khi = lohi[1] + 1;
  const unsigned bits = tile_bits;
  const int c_end = segmented ? (ke - 1) / kRangeChunk + 1 : 0;
  int ci = segmented ? kb / kRangeChunk : 0;

  const char* kbase = p.k + int64_t(g) * p.k_nb1 + c * 8 * int(sizeof(KV));
  const char* vbase = p.v + int64_t(g) * p.v_nb1 + c * 8 * int(sizeof(KV));
  const int rr = row_of<R>(c);  // the row this lane's reduced dot belongs to
  const float* mrow = (c < R && rr < nr) ? p.mask + ((row0 + rr) / G) * p.m_nb1 : nullptr;

  float acc[R][8];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[r][e] = 0.f;

  for (;;) {
    if (segmented) {  // the next range chunk's extent, clipped to the split
      if (ci >= c_end) break;
      __syncthreads();  // every thread has read lohi
      if (tid == 0) lohi[0] = INT_MAX, lohi[1] = -1;
      __syncthreads();
      if (tid <= t_last - t_first) {
        const int2 x = p.ranges[int64_t(t_first + tid) * p.n_rchunks + ci];
        const int a = max(x.x, kb), b = min(x.y, ke) - 1;
        if (a <= b) atomicMin(&lohi[0], a), atomicMax(&lohi[1], b);
      }
      __syncthreads();
      klo = lohi[0], khi = lohi[1] + 1;
      ++ci;
    }
    // The tiles: from klo on, to khi; strided: the split's own tiles
    // between them (those with no key to see skipped), each to its end.
    for (int tile = p.strided ? split : 0, u = 0;; tile += p.strided ? p.splits : 1, ++u) {
      int k0, kend;
      if (p.strided) {
        const int t0 = tile * TK;
        if (t0 >= khi) break;
        k0 = max(t0, klo), kend = min(khi, t0 + TK);
        if (k0 >= kend || (u < 32 && !(bits >> u & 1))) continue;
      } else {
        k0 = klo + tile * TK, kend = khi;
        if (k0 >= khi) break;
      }
      // K, V and mask values of this thread's keys, all in flight together.
      Row8<KV> kr[KPT], vr[KPT];
      float mv[KPT];
#pragma unroll
      for (int i = 0; i < KPT; ++i) {
        const int j = k0 + i * NKG + kg;
        if (j < kend && c < dc) {
          kr[i].load(kbase + j * p.k_nb2, p.kv16);
          vr[i].load(vbase + j * p.v_nb2, p.kv16);
        } else {
          kr[i].zero();
          vr[i].zero();
        }
        mv[i] = (j < kend && mrow) ? __ldg(mrow + j) : -INFINITY;
      }
      // Scores.
#pragma unroll
      for (int i = 0; i < KPT; ++i) {
        float kf[8];
        kr[i].get(kf);
        float part[kVecMaxRows];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float s = 0.f;
#pragma unroll
          for (int e = 0; e < 8; ++e) s = fmaf(q[r][e], kf[e], s);
          part[r] = s;
        }
        Butterfly<R, 1, L>::run(part, c);
        if (c < R) sh[rr * TK + i * NKG + kg] = mv[i] == -INFINITY ? -INFINITY : fmaf(mv[i], kLog2e, part[0]);
      }
      __syncthreads();
      // Online softmax, a warp per row.
#pragma unroll
      for (int r = warp; r < R; r += TH / 32) {
        if (r < nr) {
          float x[NPL];
          float mx = -INFINITY;
#pragma unroll
          for (int u = 0; u < NPL; ++u) {
            const int i = lane + 32 * u;
            x[u] = i < TK ? sh[r * TK + i] : -INFINITY;
            mx = fmaxf(mx, x[u]);
          }
          mx = warp_max(mx);
          const float m_old = m_s[r], m_new = fmaxf(m_old, mx);
          const float m_use = m_new == -INFINITY ? 0.f : m_new;
          const float alpha = fast_exp2(m_old - m_use);
          float sum = 0.f;
#pragma unroll
          for (int u = 0; u < NPL; ++u) {
            const int i = lane + 32 * u;
            const float e = fast_exp2(x[u] - m_use);
            if (i < TK) sh[r * TK + i] = e;
            sum += e;
          }
          sum = warp_sum(sum);
          __syncwarp();  // every lane has read m_s[r] and l_s[r] (racecheck)
          if (lane == 0) {
            m_s[r] = m_new;
            l_s[r] = l_s[r] * alpha + sum;
            al_s[r] = alpha;
          }
        }
      }
      __syncthreads();
      // acc = acc * alpha + p v.
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float a = al_s[r];
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[r][e] *= a;
      }
#pragma unroll
      for (int i = 0; i < KPT; ++i) {
        const int j = k0 + i * NKG + kg;
        if (j < kend) {
          float vf[8];
          vr[i].get(vf);
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const float pr = sh[r * TK + i * NKG + kg];
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[r][e] = fmaf(pr, vf[e], acc[r][e]);
          }
        }
      }
      __syncthreads();
    }
    if (!segmented) break;
  }

  // Sum the key groups' accumulators.
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float4* d = reinterpret_cast<float4*>(sh + (kg * R + r) * DL + c * 8);
    d[0] = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
    d[1] = make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]);
  }
  __syncthreads();
  for (int i = tid; i < nr * D; i += TH) {
    const int r = i / D, d = i - r * D;
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < NKG; ++k) s += sh[(k * R + r) * DL + d];
    const int row = row0 + r, t = row / G, h = g * G + row % G;
    if (p.splits == 1) {
      const float l = l_s[r], o = l > 0.f ? s / l : 0.f;
      p.out[t * p.o_nb1 + int64_t(h) * D + d] = o;
      // D % 32 == 0 with q8: a warp's 32 consecutive i are one block of dims.
      if (p.q8.q) q8_store_block(p.q8, t, (int64_t(h) * D + d) / 32, o);
    } else {
      const int64_t pr = (int64_t(split) * p.T + t) * p.Hq + h;
      p.part_o[pr * D + d] = s;
      if (d == 0) p.part_ml[pr] = make_float2(m_s[r], l_s[r]);
    }
  }
}

// ---------------------------------------------------------------------------
// attn_mma helpers (sm_80+).
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// d += a b: m16n8k16, f16 inputs, f32 accumulators.
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int D>
struct MmaCfg {
  static constexpr int BN = D >= 256 ? 32 : 64;               // keys per tile
  static constexpr int LD = D + 8;                            // shared row stride in halves (conflict-free ldmatrix)
  static constexpr int smem_bytes = (kBM + 4 * BN) * LD * 2;  // Q, then K and V twice
};

// attn_mma: grid (row blocks of 64, Hkv, splits), 128 threads, dynamic
// shared memory MmaCfg<D>::smem_bytes.
template <int D>
__global__ void __launch_bounds__(kThreads) attn_mma(const Params p) {
  pdl_wait();
  constexpr int BN = MmaCfg<D>::BN, LD = MmaCfg<D>::LD;
  constexpr int NT = BN / 8, DT = D / 8, CH = D / 8;  // key n-tiles, dim n-tiles, 16-byte chunks per row
  extern __shared__ __align__(16) unsigned char smem[];
  __half* Qs = reinterpret_cast<__half*>(smem);
  __half* Ks = Qs + kBM * LD;
  __half* Vs = Ks + 2 * BN * LD;
  __shared__ int lohi[2];
  // Per range chunk, the block's tokens' extent of unmasked keys: key tiles
  // outside it are skipped (a prompt chunk whose shared prefix lies far from
  // its own cells, decode tokens of many sequences in one block).
  constexpr int kMaxSegs = 64;
  __shared__ int2 seg[kMaxSegs];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = blockIdx.y, split = blockIdx.z;
  const int G = p.G, S = p.S, rows = p.rows;
  // Last row blocks first: under a causal mask they see the most keys.
  const int row0 = (gridDim.x - 1 - blockIdx.x) * kBM;
  const int nr = min(kBM, rows - row0);
  const int t_first = row0 / G, t_last = (row0 + nr - 1) / G;

  // The block's key extent, from the per-token ranges.
  if (warp == 0) {
    int lo = INT_MAX, hi = 0;
    const int n = (t_last - t_first + 1) * p.n_rchunks;
    const int2* rg = p.ranges + int64_t(t_first) * p.n_rchunks;
    for (int i = lane; i < n; i += 32) {
      const int2 x = rg[i];
      lo = min(lo, x.x), hi = max(hi, x.y);
    }
    lo = __reduce_min_sync(0xffffffffu, lo);
    hi = __reduce_max_sync(0xffffffffu, hi);
    if (lane == 0) lohi[0] = lo, lohi[1] = hi;
  } else if (warp == 1 && p.n_rchunks <= kMaxSegs) {
    for (int ci = lane; ci < p.n_rchunks; ci += 32) {
      int lo = INT_MAX, hi = 0;
      for (int t = t_first; t <= t_last; ++t) {
        const int2 x = p.ranges[int64_t(t) * p.n_rchunks + ci];
        lo = min(lo, x.x), hi = max(hi, x.y);
      }
      seg[ci] = make_int2(lo, hi);
    }
  }
  // Q, scaled, as halves.
  for (int i = tid; i < kBM * (D / 2); i += kThreads) {
    const int r = i / (D / 2), c2 = i - r * (D / 2);
    float2 x = make_float2(0.f, 0.f);
    if (r < nr) {
      const int row = row0 + r, t = row / G, h = g * G + row % G;
      const float* qp = p.q + t * p.q_nb2 + h * p.q_nb1 + 2 * c2;
      x = make_float2(qp[0] * p.qscale, qp[1] * p.qscale);
    }
    *reinterpret_cast<__half2*>(Qs + r * LD + 2 * c2) = __floats2half2_rn(x.x, x.y);
  }
  __syncthreads();
  int tb = 0, te = 0;  // this split's key tiles
  {
    const int lo = lohi[0], hi = lohi[1];
    if (hi > lo) {
      const int t0 = lo / BN, n = (hi + BN - 1) / BN - t0;
      tb = t0 + int(int64_t(split) * n / p.splits);
      te = t0 + int(int64_t(split + 1) * n / p.splits);
    }
  }

  const char* kg_base = p.k + int64_t(g) * p.k_nb1;
  const char* vg_base = p.v + int64_t(g) * p.v_nb1;
  auto load_tile = [&](int kt, int st) {
    const int k0 = kt * BN;
    const uint32_t ks = smem_u32(Ks + st * BN * LD), vs = smem_u32(Vs + st * BN * LD);
#pragma unroll
    for (int it = 0; it < BN * CH / kThreads; ++it) {
      const int i = tid + it * kThreads;
      const int kr = i / CH, cc = i - kr * CH, key = k0 + kr;
      const bool ok = key < S;
      const int64_t kk = ok ? key : 0;
      const uint32_t off = (kr * LD + cc * 8) * 2;
      cp_async16(ks + off, kg_base + kk * p.k_nb2 + cc * 16, ok ? 16 : 0);
      cp_async16(vs + off, vg_base + kk * p.v_nb2 + cc * 16, ok ? 16 : 0);
    }
  };

  const bool active = row0 + warp * 16 < rows;                 // the warp has a valid row
  const int ra = row0 + warp * 16 + (lane >> 2), rb = ra + 8;  // this thread's rows
  const float* mra = ra < rows ? p.mask + (ra / G) * p.m_nb1 : nullptr;
  const float* mrb = rb < rows ? p.mask + (rb / G) * p.m_nb1 : nullptr;
  // ldmatrix addresses: A (Q) rows lane%16, cols (lane/16)*8; B (K) keys
  // (lane/16)*8 + lane%8, dims ((lane/8)%2)*8; B (V, transposed) keys
  // ((lane/8)%2)*8 + lane%8, dims (lane/16)*8.
  const uint32_t q_addr = smem_u32(Qs + (warp * 16 + (lane & 15)) * LD + (lane >> 4) * 8);
  const uint32_t k_addr = smem_u32(Ks + ((lane >> 4) * 8 + (lane & 7)) * LD + ((lane >> 3) & 1) * 8);
  const uint32_t v_addr = smem_u32(Vs + (((lane >> 3) & 1) * 8 + (lane & 7)) * LD + (lane >> 4) * 8);

  float o[DT][4];
#pragma unroll
  for (int d = 0; d < DT; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.f, l_b = 0.f;

  // The next key tile from kt on with an unmasked key for some row (as far
  // as the chunks' extents tell).
  const bool skip = p.n_rchunks <= kMaxSegs;
  auto next_tile = [&](int kt) {
    for (; skip && kt < te; ++kt) {
      const int2 e = seg[kt * BN / kRangeChunk];
      if (kt * BN < e.y && (kt + 1) * BN > e.x) break;
    }
    return kt;
  };
  int kt = next_tile(tb);
  if (kt < te) load_tile(kt, 0);
  cp_async_commit();
  for (int it = 0; kt < te; ++it) {
    const int st = it & 1;
    const int kn = next_tile(kt + 1);
    if (kn < te) load_tile(kn, st ^ 1);
    cp_async_commit();
    // Mask values of this thread's score fragment: keys k0 + nt*8 + 2*(lane%4) + {0,1}.
    float mk[NT][4];
    const int key0 = kt * BN + 2 * (lane & 3);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = key0 + nt * 8 + e;
        mk[nt][e] = (active && mra && key < S) ? __ldg(mra + key) : -INFINITY;
        mk[nt][2 + e] = (active && mrb && key < S) ? __ldg(mrb + key) : -INFINITY;
      }
    cp_async_wait<1>();
    __syncthreads();
    if (active) {
      const uint32_t stage_off = uint32_t(st * BN * LD * 2);
      // S = Q K^T (log2 units).
      float s[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t a[4];
        ldmatrix_x4(a, q_addr + ks * 32);
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
          uint32_t b[4];
          ldmatrix_x4(b, k_addr + stage_off + (np * 16 * LD + ks * 16) * 2);
          mma_16816(s[2 * np], a, b[0], b[1]);
          mma_16816(s[2 * np + 1], a, b[2], b[3]);
        }
      }
      // Mask, then the online softmax of rows a (s[][0..1]) and b (s[][2..3]).
      float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[nt][e] = mk[nt][e] == -INFINITY ? -INFINITY : fmaf(mk[nt][e], kLog2e, s[nt][e]);
          if (e < 2)
            mx_a = fmaxf(mx_a, s[nt][e]);
          else
            mx_b = fmaxf(mx_b, s[nt][e]);
        }
      mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
      mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
      mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
      mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
      const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
      const float mu_a = mn_a == -INFINITY ? 0.f : mn_a, mu_b = mn_b == -INFINITY ? 0.f : mn_b;
      const float al_a = fast_exp2(m_a - mu_a), al_b = fast_exp2(m_b - mu_b);
      m_a = mn_a, m_b = mn_b;
      float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        s[nt][0] = fast_exp2(s[nt][0] - mu_a);
        s[nt][1] = fast_exp2(s[nt][1] - mu_a);
        s[nt][2] = fast_exp2(s[nt][2] - mu_b);
        s[nt][3] = fast_exp2(s[nt][3] - mu_b);
        sum_a += s[nt][0] + s[nt][1];
        sum_b += s[nt][2] + s[nt][3];
      }
      l_a = l_a * al_a + sum_a;
      l_b = l_b * al_b + sum_b;
#pragma unroll
      for (int d = 0; d < DT; ++d) {
        o[d][0] *= al_a, o[d][1] *= al_a;
        o[d][2] *= al_b, o[d][3] *= al_b;
      }
      // O += P V.
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        const uint32_t a[4] = {pack_h2(s[2 * kk][0], s[2 * kk][1]), pack_h2(s[2 * kk][2], s[2 * kk][3]),
                               pack_h2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                               pack_h2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int dp = 0; dp < DT / 2; ++dp) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, v_addr + stage_off + (kk * 16 * LD + dp * 16) * 2);
          mma_16816(o[2 * dp], a, b[0], b[1]);
          mma_16816(o[2 * dp + 1], a, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // stage st is refilled by the next iteration
    kt = kn;
  }
  cp_async_wait<0>();

  if (!active) return;
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
#pragma unroll
  for (int hb = 0; hb < 2; ++hb) {
    const int row = hb ? rb : ra;
    if (row >= rows) continue;
    const int t = row / G, h = g * G + row % G;
    const float l = hb ? l_b : l_a, m = hb ? m_b : m_a;
    if (p.splits == 1) {
      const float inv = l > 0.f ? 1.f / l : 0.f;
      float* op = p.out + t * p.o_nb1 + int64_t(h) * D + 2 * (lane & 3);
#pragma unroll
      for (int d = 0; d < DT; ++d)
        *reinterpret_cast<float2*>(op + d * 8) = make_float2(o[d][2 * hb] * inv, o[d][2 * hb + 1] * inv);
    } else {
      const int64_t pr = (int64_t(split) * p.T + t) * p.Hq + h;
      float* op = p.part_o + pr * D + 2 * (lane & 3);
#pragma unroll
      for (int d = 0; d < DT; ++d) *reinterpret_cast<float2*>(op + d * 8) = make_float2(o[d][2 * hb], o[d][2 * hb + 1]);
      if ((lane & 3) == 0) p.part_ml[pr] = make_float2(m, l);
    }
  }
}

// attn_dec: decode on tensor cores (F16 caches, D in {64, 128, 256}, at most
// 8 query rows a block: the G heads of a kv head for one token or a few).
// attn_vec's per-key work (a dot of R rows on 8-dim slices, a butterfly
// across lanes, the p v sums) costs more issue slots than the keys take to
// arrive: at depth 4,096 it streams at ~30% of DRAM bandwidth. Here the warps
// of a block split each key tile (16 keys a warp), S = Q K^T by mma m16n8k16
// (Q's fragments in registers, rows 8-15 zero: the m16 shape's unused half) and O^T += V^T P^T with
// the rows as the mma's n8 (the accumulator holds the 8 rows, none wasted;
// P's fragment of S is the B operand as it lies). Each warp keeps its own
// running (max, sum) and O; the warps merge at the end through shared memory.
// Key tiles are double-buffered by cp.async (the next one in flight while
// the current one is computed). Splits are strided as attn_vec's: split s
// takes tiles s, s + n, ... and skips those whose keys are all masked
// (scanned before pdl_wait() where the mask is fixed).
// Grid (row blocks of 8, Hkv, splits), DecCfg<D>::TH threads, dynamic
// shared memory DecCfg<D>::smem_bytes.
template <int D>
struct DecCfg {
  static constexpr int NW = D >= 256 ? 2 : 4;  // warps, 16 keys of a tile each
  static constexpr int TH = NW * 32;
  static constexpr int BN = 16 * NW;  // keys per tile
  static constexpr int LD = D + 8;    // shared row stride in halves (conflict-free ldmatrix)
  static constexpr int OLD = D + 4;   // the warps' outputs at the merge, floats
  static constexpr int smem_bytes = 4 * BN * LD * 2;  // K and V twice
  static_assert(NW * kDecRows * OLD * 4 + NW * kDecRows * 8 <= 4 * BN * LD * 2, "merge buffer fits the stages");
};

template <int D>
__global__ void __launch_bounds__(DecCfg<D>::TH) attn_dec(const Params p) {
  using C = DecCfg<D>;
  constexpr int NW = C::NW, TH = C::TH, BN = C::BN, LD = C::LD, CH = D / 8, DT = D / 16;
  extern __shared__ __align__(16) unsigned char smem[];
  __half* Ks = reinterpret_cast<__half*>(smem);
  __half* Vs = Ks + 2 * BN * LD;
  __shared__ unsigned long long tile_bits;  // owned tile u (< 64) has an unmasked key

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = blockIdx.y, split = blockIdx.z, G = p.G, S = p.S;
  const int row0 = blockIdx.x * kDecRows;
  const int nr = min(kDecRows, p.rows - row0);
  const int t_first = row0 / G, t_last = (row0 + nr - 1) / G;
  const int ntiles = (S + BN - 1) / BN;

  if (tid == 0) tile_bits = 0;
  __syncthreads();
  // Which of the split's tiles have a key to see for the block's tokens.
  const auto scan = [&] {
    for (int j = split, u = 0; j < ntiles && u < 64; j += p.splits, ++u) {
      bool any = false;
      const int k1 = min(S, (j + 1) * BN);
      for (int t = t_first; t <= t_last; ++t)
        for (int x = j * BN + tid; x < k1; x += TH) any |= __ldg(p.mask + t * p.m_nb1 + x) != -INFINITY;
      if (__any_sync(0xffffffffu, any) && lane == 0) atomicOr(&tile_bits, 1ull << u);
    }
  };
  if (p.mask_early) scan();
  pdl_wait();
  if (!p.mask_early) scan();
  __syncthreads();
  const unsigned long long bits = tile_bits;
  // The owned tile from u on with a key to see (u >= 64: not scanned, taken).
  const auto next = [&](int u) {
    for (; split + u * p.splits < ntiles; ++u)
      if (u >= 64 || (bits >> u & 1)) return u;
    return -1;
  };

  const char* kg_base = p.k + int64_t(g) * p.k_nb1;
  const char* vg_base = p.v + int64_t(g) * p.v_nb1;
  // This thread's part of a tile: 16 bytes (chunk cc) of keys kr0 + RPI it;
  // pointers stepped by adds (the per-key products of 64-bit strides were
  // half the loop's instructions).
  constexpr int RPI = TH / CH;  // key rows a pass of the block covers
  static_assert(TH % CH == 0 && BN % RPI == 0, "a tile is whole passes");
  const int kr0 = tid / CH, cc = tid % CH;
  const int64_t kstep = int64_t(RPI) * p.k_nb2, vstep = int64_t(RPI) * p.v_nb2;
  const char* kq = kg_base + int64_t(kr0) * p.k_nb2 + cc * 16;
  const char* vq = vg_base + int64_t(kr0) * p.v_nb2 + cc * 16;
  const uint32_t sh_off = uint32_t((kr0 * LD + cc * 8) * 2);
  const auto load_tile = [&](int u, int st) {
    const int k0 = (split + u * p.splits) * BN;
    const char* kp = kq + int64_t(k0) * p.k_nb2;
    const char* vp = vq + int64_t(k0) * p.v_nb2;
    const uint32_t ks = smem_u32(Ks + st * BN * LD) + sh_off, vs = smem_u32(Vs + st * BN * LD) + sh_off;
#pragma unroll
    for (int it = 0; it < BN / RPI; ++it) {
      const bool ok = k0 + kr0 + it * RPI < S;  // else zeros, from a valid address
      cp_async16(ks + it * RPI * LD * 2, ok ? kp : kg_base, ok ? 16 : 0);
      cp_async16(vs + it * RPI * LD * 2, ok ? vp : vg_base, ok ? 16 : 0);
      kp += kstep, vp += vstep;
    }
  };
  int u = next(0);
  if (u >= 0) load_tile(u, 0);
  cp_async_commit();

  // This lane's S row (lane / 4) and its mask; its O^T rows 2 (lane % 4) + {0, 1}.
  const int ra = lane >> 2, qd = lane & 3;
  const float* mra = ra < nr ? p.mask + ((row0 + ra) / G) * p.m_nb1 : nullptr;
  // Q's A fragments, scaled, as halves, kept in registers for every tile:
  // row ra's dims 16 ks + 2 qd + {0, 1} and + 8 (rows 8-15 of the m16 shape
  // are zero registers).
  uint32_t qa[D / 16][2];
  {
    const int row = row0 + ra;
    const float* qp = ra < nr ? p.q + (row / G) * p.q_nb2 + (g * G + row % G) * p.q_nb1 + 2 * qd : nullptr;
    float x[D / 16][4];
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
#pragma unroll
      for (int e = 0; e < 4; ++e) x[ks][e] = qp ? qp[ks * 16 + (e >> 1) * 8 + (e & 1)] : 0.f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      qa[ks][0] = pack_h2(x[ks][0] * p.qscale, x[ks][1] * p.qscale);
      qa[ks][1] = pack_h2(x[ks][2] * p.qscale, x[ks][3] * p.qscale);
    }
  }
  const uint32_t k_addr = smem_u32(Ks + (warp * 16 + (lane >> 4) * 8 + (lane & 7)) * LD + ((lane >> 3) & 1) * 8);
  const uint32_t v_addr = smem_u32(Vs + (warp * 16 + (lane & 7) + ((lane >> 4) & 1) * 8) * LD + ((lane >> 3) & 1) * 8);

  float o[DT][4];
#pragma unroll
  for (int d = 0; d < DT; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
  float m = -INFINITY, l = 0.f;

  for (int it = 0; u >= 0; ++it) {
    const int st = it & 1;
    const int un = next(u + 1);
    if (un >= 0) load_tile(un, st ^ 1);
    cp_async_commit();
    // Mask values of this lane's scores: keys k0 + 16 warp + 8 nt + 2 (lane % 4) + {0, 1}.
    float mk[2][2];
    const int key0 = (split + u * p.splits) * BN + warp * 16 + 2 * qd;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = key0 + nt * 8 + e;
        mk[nt][e] = (mra && key < S) ? __ldg(mra + key) : -INFINITY;
      }
    cp_async_wait<1>();
    __syncthreads();
    const uint32_t stage_off = uint32_t(st * BN * LD * 2);
    // S = Q K^T (log2 units), this warp's 16 keys; the dim steps spread over
    // two accumulators (two chains of dependent mma, not one: +2.4% tg at
    // depth 4,096 on the 8B, H100; four measured 3.3% slower than two).
    constexpr int NC = 2;
    float sc[NC][2][4];
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) sc[c][nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const uint32_t a[4] = {qa[ks][0], 0u, qa[ks][1], 0u};
      uint32_t b[4];
      ldmatrix_x4(b, k_addr + stage_off + ks * 32);
      mma_16816(sc[ks % NC][0], a, b[0], b[1]);
      mma_16816(sc[ks % NC][1], a, b[2], b[3]);
    }
    float s[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[nt][e] = sc[0][nt][e];
#pragma unroll
        for (int c = 1; c < NC; ++c) s[nt][e] += sc[c][nt][e];
      }
    // Online softmax of row ra (s[][0..1]; rows 8-15 in s[][2..3] unused).
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[nt][e] = mk[nt][e] == -INFINITY ? -INFINITY : fmaf(mk[nt][e], kLog2e, s[nt][e]);
        mx = fmaxf(mx, s[nt][e]);
      }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mn = fmaxf(m, mx), mu = mn == -INFINITY ? 0.f : mn;
    const float al = fast_exp2(m - mu);
    m = mn;
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) sum += s[nt][e] = fast_exp2(s[nt][e] - mu);
    l = l * al + sum;
    // O^T's rows 2 qd and 2 qd + 1 take those rows' alpha (held by lanes 8 qd and 8 qd + 4).
    const float al0 = __shfl_sync(0xffffffffu, al, 8 * qd), al1 = __shfl_sync(0xffffffffu, al, 8 * qd + 4);
#pragma unroll
    for (int d = 0; d < DT; ++d) o[d][0] *= al0, o[d][1] *= al1, o[d][2] *= al0, o[d][3] *= al1;
    // O^T += V^T P^T: B = P^T is this lane's (row ra, keys 2 qd + {0, 1}, + 8).
    const uint32_t b0 = pack_h2(s[0][0], s[0][1]), b1 = pack_h2(s[1][0], s[1][1]);
#pragma unroll
    for (int d = 0; d < DT; ++d) {
      uint32_t a[4];
      ldmatrix_x4_trans(a, v_addr + stage_off + d * 32);
      mma_16816(o[d], a, b0, b1);
    }
    __syncthreads();  // stage st is refilled by the next iteration
    u = un;
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the stages: they hold the merge

  // Merge the warps: (max, sum) of each row, O^T as rows of dims.
  float* osh = reinterpret_cast<float*>(Ks);
  float2* mlsh = reinterpret_cast<float2*>(osh + NW * kDecRows * C::OLD);
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  if (qd == 0) mlsh[warp * kDecRows + ra] = make_float2(m, l);
#pragma unroll
  for (int d = 0; d < DT; ++d)
#pragma unroll
    for (int e = 0; e < 2; ++e)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
        osh[(warp * kDecRows + 2 * qd + e) * C::OLD + d * 16 + hh * 8 + ra] = o[d][2 * hh + e];
  __syncthreads();
  for (int i = tid; i < nr * D; i += TH) {
    const int r = i / D, d = i - r * D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < NW; ++w) M = fmaxf(M, mlsh[w * kDecRows + r].x);
    const float mu = M == -INFINITY ? 0.f : M;
    float acc = 0.f, L = 0.f;
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      const float2 ml = mlsh[w * kDecRows + r];
      const float wt = fast_exp2(ml.x - mu);
      acc = fmaf(wt, osh[(w * kDecRows + r) * C::OLD + d], acc);
      L = fmaf(wt, ml.y, L);
    }
    const int row = row0 + r, t = row / G, h = g * G + row % G;
    if (p.splits == 1) {
      const float out = L > 0.f ? acc / L : 0.f;
      p.out[t * p.o_nb1 + int64_t(h) * D + d] = out;
      if (p.q8.q) q8_store_block(p.q8, t, (int64_t(h) * D + d) / 32, out);  // D % 32 == 0
    } else {  // attn_combine reads no output of a split that saw no key (max -inf)
      const int64_t pr = (int64_t(split) * p.T + t) * p.Hq + h;
      if (M != -INFINITY) p.part_o[pr * D + d] = acc;
      if (d == 0) p.part_ml[pr] = make_float2(M, L);
    }
  }
}

// attn_ranges: grid (T, ceil(S / kRangeChunk)), 256 threads. For token t and
// chunk c: (first, last + 1) unmasked key of the chunk, (S, 0) when none.
__global__ void __launch_bounds__(256) attn_ranges(const float* mask, int64_t m_nb1, int S, bool m16, int2* out) {
  pdl_wait();
  __shared__ int red[2][8];
  const int t = blockIdx.x, chunk = blockIdx.y, tid = threadIdx.x;
  const int kb = chunk * kRangeChunk, ke = min(S, kb + kRangeChunk);
  const float* mr = mask + t * m_nb1;
  int lo = INT_MAX, hi = -1;
  if (m16) {
#pragma unroll
    for (int i = 0; i < kRangeChunk / (4 * 256); ++i) {
      const int j = kb + 4 * (tid + 256 * i);
      if (j + 4 <= ke) {
        const float4 x = __ldg(reinterpret_cast<const float4*>(mr + j));
        if (x.x != -INFINITY) lo = min(lo, j), hi = max(hi, j);
        if (x.y != -INFINITY) lo = min(lo, j + 1), hi = max(hi, j + 1);
        if (x.z != -INFINITY) lo = min(lo, j + 2), hi = max(hi, j + 2);
        if (x.w != -INFINITY) lo = min(lo, j + 3), hi = max(hi, j + 3);
      } else {
        for (int jj = j; jj < ke; ++jj)
          if (__ldg(mr + jj) != -INFINITY) lo = min(lo, jj), hi = max(hi, jj);
      }
    }
  } else {
#pragma unroll 4
    for (int j = kb + tid; j < ke; j += 256)
      if (__ldg(mr + j) != -INFINITY) lo = min(lo, j), hi = max(hi, j);
  }
  lo = __reduce_min_sync(0xffffffffu, lo);
  hi = __reduce_max_sync(0xffffffffu, hi);
  if ((tid & 31) == 0) red[0][tid >> 5] = lo, red[1][tid >> 5] = hi;
  __syncthreads();
  if (tid == 0) {
    for (int w = 1; w < 8; ++w) lo = min(lo, red[0][w]), hi = max(hi, red[1][w]);
    out[int64_t(t) * gridDim.y + chunk] = hi < 0 ? make_int2(S, 0) : make_int2(lo, hi + 1);
  }
}

// attn_combine: grid (T * Hq, ceil(D / 32)), 128 threads. Block (row, d0)
// merges the splits' partials of dims d0 .. d0+31 of output row (t, h): the
// warps take every 4th split, a lane a dim.
__global__ void __launch_bounds__(kThreads) attn_combine(const Params p) {
  pdl_wait();
  constexpr int NW = kThreads / 32;
  __shared__ float wsh[kMaxSplits];
  __shared__ float red_m[NW], red_l[NW], red_a[NW][32];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t TH = int64_t(p.T) * p.Hq, row = blockIdx.x;
  const int t = int(row / p.Hq), h = int(row % p.Hq), D = p.D, ns = p.splits;
  const int d = blockIdx.y * 32 + lane;
  float* out = p.out + t * p.o_nb1 + int64_t(h) * D;
  // The largest of the splits' maxima, then weights 2^(m_s - M) and the total sum.
  float M = -INFINITY;
  for (int s = tid; s < ns; s += kThreads) M = fmaxf(M, p.part_ml[s * TH + row].x);
  M = warp_max(M);
  if (lane == 0) red_m[warp] = M;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < NW; ++w) M = fmaxf(M, red_m[w]);
  if (M == -INFINITY) {  // every key masked
    if (warp == 0 && d < D) out[d] = 0.f;
    if (warp == 0 && p.q8.q) q8_store_block(p.q8, t, int64_t(h) * (D / 32) + blockIdx.y, 0.f);
    return;
  }
  float L = 0.f;
  for (int s = tid; s < ns; s += kThreads) {
    const float2 ml = p.part_ml[s * TH + row];
    const float w = fast_exp2(ml.x - M);  // 0 for an empty split (max -inf)
    wsh[s] = w;
    L += w * ml.y;
  }
  L = warp_sum(L);
  if (lane == 0) red_l[warp] = L;
  __syncthreads();
  float a = 0.f;
  if (d < D) {
#pragma unroll 4
    for (int s = warp; s < ns; s += NW) {
      const float w = wsh[s];
      if (w != 0.f) a = fmaf(w, p.part_o[(s * TH + row) * D + d], a);
    }
  }
  red_a[warp][lane] = a;
  __syncthreads();
  if (warp == 0 && d < D) {
    float sa = 0.f, sl = 0.f;
#pragma unroll
    for (int w = 0; w < NW; ++w) sa += red_a[w][lane], sl += red_l[w];
    out[d] = sa / sl;
    // D % 32 == 0 here: the warp's 32 dims are one block of the product's x.
    if (p.q8.q) q8_store_block(p.q8, t, int64_t(h) * (D / 32) + blockIdx.y, sa / sl);
  }
}

// ---------------------------------------------------------------------------
// Host side: plans and launches.

struct Shape {
  int64_t D = 0, Hq = 0, Hkv = 0, T = 0, S = 0;
  bool f16 = false;
  bool separate = false;  // no two tokens see the same keys (graph.h's hint)
  const CudaOptions* o = nullptr;  // the plan's knobs (attn_wide, attn_strided, attn_blocks, attn_rows)
};

struct Plan {
  bool mma = false;
  bool dec = false;           // attn_dec (decode on tensor cores)
  int L = 8, R = 1, TK = 1;   // attn_vec
  int threads = kThreads;     // attn_vec
  int splits = 1, chunk = 0;  // attn_vec: keys per split
  bool strided = false;       // attn_vec: split s takes every splits-th tile from tile s (chunk = S)
  int n_rchunks = 0;          // attn_mma: ranges per token
  size_t ranges_bytes = 0, ml_bytes = 0, o_bytes = 0;
  size_t scratch() const { return ranges_bytes + ml_bytes + o_bytes; }
};

size_t round256(size_t n) { return (n + 255) / 256 * 256; }
int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool mma_dims(int64_t D) { return D == 64 || D == 128 || D == 256; }

// Splits for `base` blocks of work over `ntiles` key tiles: none from
// `enough` blocks on, else about `aim` blocks in all.
int pick_splits(int64_t base, int64_t ntiles, int64_t enough, int64_t aim, const Shape& s) {
  if (base >= enough || ntiles <= 1) return 1;
  int64_t n = std::min<int64_t>({cdiv(aim, base), ntiles, kMaxSplits});
  const size_t per_split = size_t(s.T) * size_t(s.Hq) * (size_t(s.D) * 4 + 8);
  n = std::min<int64_t>(n, std::max<int64_t>(1, int64_t(kMaxPartialBytes / per_split)));
  return int(std::max<int64_t>(n, 1));
}

void set_partials(Plan& pl, const Shape& s) {
  pl.ml_bytes = pl.o_bytes = 0;
  if (pl.splits > 1) {
    const size_t n = size_t(pl.splits) * size_t(s.T) * size_t(s.Hq);
    pl.ml_bytes = round256(n * sizeof(float2));
    pl.o_bytes = round256(n * size_t(s.D) * sizeof(float));
  }
}

Plan plan_vec(const Shape& s, int sm, int max_splits = kMaxSplits) {
  Plan pl;
  const int64_t G = s.Hq / s.Hkv, rows = s.T * G, dc = s.D / 8;
  while (pl.L < dc) pl.L *= 2;
  // Separate tokens: a block takes rows of one token only (R divides G), so
  // it reads that token's keys alone.
  if (s.separate)
    while (pl.R < kVecMaxRows && G % (2 * pl.R) == 0) pl.R *= 2;
  else
    while (pl.R < rows && pl.R < kVecMaxRows && pl.R < s.o->attn_rows) pl.R *= 2;
  const int kpt = (s.f16 ? 8 : 4) / (pl.R == 8 ? 2 : 1);
  pl.TK = kThreads / pl.L * kpt;
  const int64_t ntiles = cdiv(s.S, pl.TK);
  const int64_t base = cdiv(rows, pl.R) * s.Hkv;
  const int64_t aim = std::max(1, s.o->attn_blocks) * int64_t(sm);
  int n = std::min(max_splits, pick_splits(base, cdiv(s.S, std::max(pl.TK, kMinSplitKeys)), aim, aim, s));
  // Strided splits (CudaOptions::attn_strided): split s takes tiles s,
  // s + n, s + 2n, ..., so a sliding window deep in the cache (gemma3's
  // local layers) runs on as many splits as it has tiles rather than on
  // the one or two whose chunk holds it; else fixed chunks of the cache.
  pl.strided = s.o->attn_strided && n > 1 && !s.separate;
  if (n > 1 && !pl.strided) {
    pl.chunk = int(cdiv(ntiles, n) * pl.TK);
    n = int(cdiv(s.S, pl.chunk));
  }
  // A short span (tg at a shallow depth: S <= 256 keys for D = 128, 512 for
  // D = 64) in one split of 256 threads, at most two tiles a block, rather
  // than several splits and a merging launch (attn_combine) after them; a
  // block a query head (R = 1), so that a kv head's G heads run on G SMs: the
  // blocks wait on memory, not on each other (one block of G rows per kv
  // head was slower: H100 tg128, 8B Q4_K_M -3.4%, 1B Q4_0 -4.2%). Their K
  // and V loads after the first come from L2.
  // The same where the span fits one split but the grid would be small
  // (attn_wide >= 2: gemma3's 4 heads of one kv head on one block of 128
  // threads otherwise).
  // CudaOptions::attn_wide 0: splits as for long spans (for comparisons).
  const int wide = s.o->attn_wide;
  const bool small = n == 1 && base < sm && wide >= 2;
  if (wide && (n > 1 || small) && s.f16 && !s.separate) {
    // 256-dim heads (a key a warp): 512 threads, so that a tile is 128
    // keys and gemma3's spans up to 256 need no merging launch (attn_wide 3).
    const int wt = wide >= 3 && pl.L == 32 ? kWiderThreads : kWideThreads;
    const int tk = wt / pl.L * 8;  // 8 keys a thread a tile (f16, R = 1)
    if (s.S <= 2 * int64_t(tk)) pl.threads = wt, pl.TK = tk, pl.R = 1, n = 1;
  }
  pl.splits = std::max(n, 1);
  if (pl.splits == 1) pl.strided = false;
  if (pl.splits == 1 || pl.strided) pl.chunk = int(std::max<int64_t>(s.S, 1));
  if (s.separate) {  // one pass over the mask finds every token's span
    pl.n_rchunks = int(std::max<int64_t>(1, cdiv(s.S, kRangeChunk)));
    pl.ranges_bytes = round256(size_t(s.T) * size_t(pl.n_rchunks) * sizeof(int2));
  }
  set_partials(pl, s);
  return pl;
}

// attn_dec: blocks of 8 rows per kv head, strided splits aiming for
// attn_blocks blocks an SM (as attn_vec's).
Plan plan_dec(const Shape& s, int sm, int max_splits = kMaxSplits) {
  Plan pl;
  pl.dec = true;
  const int64_t rows = s.T * (s.Hq / s.Hkv);
  pl.R = kDecRows;
  pl.TK = s.D >= 256 ? DecCfg<256>::BN : DecCfg<128>::BN;
  pl.threads = s.D >= 256 ? DecCfg<256>::TH : DecCfg<128>::TH;
  const int64_t base = cdiv(rows, kDecRows) * s.Hkv;
  const int64_t aim = std::max(1, s.o->attn_blocks) * int64_t(sm);
  pl.splits = std::max(
      1, std::min(max_splits, pick_splits(base, cdiv(s.S, std::max(pl.TK, kMinSplitKeys)), aim, aim, s)));
  pl.strided = pl.splits > 1;
  pl.chunk = int(std::max<int64_t>(s.S, 1));
  set_partials(pl, s);
  return pl;
}

Plan plan_mma(const Shape& s, int sm, int max_splits = kMaxSplits) {
  Plan pl;
  pl.mma = true;
  const int64_t G = s.Hq / s.Hkv, rows = s.T * G;
  const int bn = s.D >= 256 ? MmaCfg<256>::BN : MmaCfg<128>::BN;
  pl.splits = std::min(
      max_splits, pick_splits(cdiv(rows, kBM) * s.Hkv, cdiv(s.S, std::max(bn, kMinSplitKeys)), sm, 2 * int64_t(sm), s));
  pl.n_rchunks = int(std::max<int64_t>(1, cdiv(s.S, kRangeChunk)));
  pl.ranges_bytes = round256(size_t(s.T) * size_t(pl.n_rchunks) * sizeof(int2));
  set_partials(pl, s);
  return pl;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Operand checks; fills the shape. Throws weir::Error naming dst.
Shape check(const Tensor& dst, const CudaOptions& o) {
  const Tensor* q = dst.src[0];
  const Tensor* k = dst.src[1];
  const Tensor* v = dst.src[2];
  const Tensor* mask = dst.src[3];
  const std::string where = "attention " + dst.name;
  if (!q || !k || !v || !mask) throw Error(where + ": missing operands");
  auto shape = [](const Tensor* t) {
    return t->name + "[" + std::to_string(t->ne[0]) + "," + std::to_string(t->ne[1]) + "," + std::to_string(t->ne[2]) +
           "," + std::to_string(t->ne[3]) + "]";
  };
  if (q->dtype != DType::F32 || q->nb[0] != 4 || q->nb[1] % 4 || q->nb[2] % 4)
    throw Error(where + ": q " + q->name + " must be F32 with contiguous rows and strides a multiple of 4");
  if (k->dtype != v->dtype) throw Error(where + ": k and v must have the same dtype");
  for (const Tensor* kv : {k, v}) {
    const size_t es = kv->dtype == DType::F32 ? 4 : kv->dtype == DType::F16 ? 2 : 0;
    if (es == 0 || kv->nb[0] != es || kv->nb[1] % es || kv->nb[2] % es)
      throw Error(where + ": " + kv->name + " must be F32 or F16 with contiguous rows");
  }
  if (mask->dtype != DType::F32 || mask->nb[0] != 4 || mask->nb[1] % 4)
    throw Error(where + ": mask " + mask->name + " must be F32 with contiguous rows");
  if (dst.dtype != DType::F32 || dst.nb[0] != 4 || dst.nb[1] % 4) throw Error(where + ": output must be F32");
  Shape s;
  s.D = q->ne[0], s.Hq = q->ne[1], s.T = q->ne[2], s.Hkv = k->ne[1], s.S = k->ne[2];
  s.f16 = k->dtype == DType::F16;
  // CudaOptions::attn_separate off ignores the hint (for comparisons).
  s.separate = o.attn_separate && dst.iparams[0] != 0 && q->ne[2] > 1;
  s.o = &o;
  if (k->ne[0] != s.D || v->ne[0] != s.D || v->ne[1] != s.Hkv || v->ne[2] != s.S || s.Hkv <= 0 || s.Hq % s.Hkv != 0 ||
      mask->ne[0] != s.S || mask->ne[1] != s.T || dst.ne[0] != s.D * s.Hq || dst.ne[1] != s.T || q->ne[3] != 1 ||
      k->ne[3] != 1 || v->ne[3] != 1 || mask->ne[2] != 1 || mask->ne[3] != 1)
    throw Error(where + ": shapes q " + shape(q) + ", k " + shape(k) + ", v " + shape(v) + ", mask " + shape(mask) +
                " do not fit");
  if (s.D <= 0 || s.D % 8 != 0 || s.D > 256)
    throw Error(where + ": head size " + std::to_string(s.D) + " not supported (a multiple of 8 up to 256)");
  if (s.T * s.Hq > INT32_MAX / 2 || s.S > INT32_MAX / 2) throw Error(where + ": too many tokens or keys");
  return s;
}

bool mma_eligible(const Shape& s) {
  return s.f16 && mma_dims(s.D) && s.T * (s.Hq / s.Hkv) > kVecMaxRows && !s.separate;
}

// attn_dec takes what attn_vec would take with its 128-thread blocks (not
// the short spans' one split of a head a block) where the cache is F16 and
// D in {64, 128, 256} (CudaOptions::attn_dec).
bool dec_eligible(const Shape& s) { return s.o->attn_dec && s.f16 && mma_dims(s.D) && !s.separate; }

template <int L, int R>
void launch_vec_r(const Params& p, bool f16, int threads, dim3 grid, cudaStream_t st) {
  if constexpr (R == 1)
    if (threads == kWideThreads && f16)
      return launch_kernel(attn_vec<L, R, __half, kWideThreads>, grid, kWideThreads, 0, st, p);
  if constexpr (R == 1 && L == 32)
    if (threads == kWiderThreads && f16)
      return launch_kernel(attn_vec<L, R, __half, kWiderThreads>, grid, kWiderThreads, 0, st, p);
  if (threads != kThreads) throw Error("attention: no attn_vec of " + std::to_string(threads) + " threads");
  if (f16)
    launch_kernel(attn_vec<L, R, __half, kThreads>, grid, kThreads, 0, st, p);
  else
    launch_kernel(attn_vec<L, R, float, kThreads>, grid, kThreads, 0, st, p);
}
template <int L>
void launch_vec_l(const Params& p, int R, bool f16, int threads, dim3 grid, cudaStream_t st) {
  switch (R) {
    case 1: return launch_vec_r<L, 1>(p, f16, threads, grid, st);
    case 2: return launch_vec_r<L, 2>(p, f16, threads, grid, st);
    case 4: return launch_vec_r<L, 4>(p, f16, threads, grid, st);
    default: return launch_vec_r<L, 8>(p, f16, threads, grid, st);
  }
}

// Lets `kernel` take `bytes` of dynamic shared memory on this device (once
// a device: `raised` keeps a bit per device).
template <typename Kernel>
void allow_smem(Kernel kernel, int bytes, std::atomic<uint64_t>& raised) {
  int dev = 0;
  WEIR_CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = dev < 64 ? uint64_t(1) << dev : 0;
  if (!bit || !(raised.load(std::memory_order_relaxed) & bit)) {
    WEIR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    raised.fetch_or(bit, std::memory_order_relaxed);
  }
}

template <int D>
void launch_mma(const Params& p, dim3 grid, cudaStream_t st) {
  static std::atomic<uint64_t> raised{0};
  allow_smem(attn_mma<D>, MmaCfg<D>::smem_bytes, raised);
  launch_kernel(attn_mma<D>, grid, kThreads, MmaCfg<D>::smem_bytes, st, p);
}

template <int D>
void launch_dec(const Params& p, dim3 grid, cudaStream_t st) {
  static std::atomic<uint64_t> raised{0};
  allow_smem(attn_dec<D>, DecCfg<D>::smem_bytes, raised);
  launch_kernel(attn_dec<D>, grid, DecCfg<D>::TH, DecCfg<D>::smem_bytes, st, p);
}

}  // namespace

// Scratch ahead of the partials for the output as 8-bit blocks (OpCtx::
// quantize_out: the decode product after attention reads them there).
size_t q8_reserve(const Shape& s) {
  return s.T <= kMaxQ8Tokens && s.D % 32 == 0 ? round256(q8_act_bytes(s.D * s.Hq, s.T)) : 0;
}

size_t attention_scratch_bytes(const Tensor& dst, const CudaOptions& o) {
  Shape s;
  try {
    s = check(dst, o);
  } catch (const Error&) {
    return 0;  // op_attention reports it
  }
  if (s.T == 0) return 0;
  size_t n = plan_vec(s, kMaxSms).scratch();
  if (mma_eligible(s)) n = std::max(n, plan_mma(s, kMaxSms).scratch());
  if (dec_eligible(s)) n = std::max(n, plan_dec(s, kMaxSms).scratch());
  return n + q8_reserve(s);
}

void op_attention(const Tensor& dst, const OpCtx& c) {
  const Shape s = check(dst, c.options());
  if (s.T == 0) return;
  const Tensor* q = dst.src[0];
  const Tensor* k = dst.src[1];
  const Tensor* v = dst.src[2];
  const Tensor* mask = dst.src[3];
  const int sm = std::clamp(c.sm_count, 1, kMaxSms);

  Params p{};
  p.q = static_cast<const float*>(q->data);
  p.q_nb1 = int64_t(q->nb[1] / 4), p.q_nb2 = int64_t(q->nb[2] / 4);
  p.k = static_cast<const char*>(k->data), p.v = static_cast<const char*>(v->data);
  p.k_nb1 = int64_t(k->nb[1]), p.k_nb2 = int64_t(k->nb[2]);
  p.v_nb1 = int64_t(v->nb[1]), p.v_nb2 = int64_t(v->nb[2]);
  p.mask = static_cast<const float*>(mask->data), p.m_nb1 = int64_t(mask->nb[1] / 4);
  p.out = static_cast<float*>(dst.data), p.o_nb1 = int64_t(dst.nb[1] / 4);
  p.D = int(s.D), p.Hq = int(s.Hq), p.G = int(s.Hq / s.Hkv), p.T = int(s.T), p.S = int(s.S);
  p.rows = p.T * p.G;
  p.qscale = dst.fparams[0] * kLog2e;
  p.q16 = aligned16(q->data) && q->nb[1] % 16 == 0 && q->nb[2] % 16 == 0;
  p.mask_early = c.w_fixed && c.options().attn_early_mask;  // off: scanned after pdl_wait()
  p.kv16 = aligned16(k->data) && aligned16(v->data) && k->nb[1] % 16 == 0 && k->nb[2] % 16 == 0 && v->nb[1] % 16 == 0 &&
           v->nb[2] % 16 == 0;
  const bool out8 = (reinterpret_cast<uintptr_t>(dst.data) & 7) == 0 && dst.nb[1] % 8 == 0;

  // The output as 8-bit blocks at the start of scratch (quantize_out), the
  // partials after them.
  const size_t q8_bytes = c.quantize_out ? q8_reserve(s) : 0;
  if (c.quantize_out && (q8_bytes == 0 || q8_bytes > c.scratch_bytes))
    throw Error("attention " + dst.name + ": cannot write its output as 8-bit blocks");
  const size_t room = c.scratch_bytes - q8_bytes;
  // The path, and splits that fit the scratch memory the plan gave.
  Plan pl;
  bool fits = false;
  if (mma_eligible(s) && p.kv16 && out8) {
    for (int ms = kMaxSplits; !fits; ms = pl.splits / 2) {
      pl = plan_mma(s, sm, ms);
      fits = pl.scratch() <= room;
      if (pl.splits == 1) break;
    }
  }
  if (!fits && dec_eligible(s) && p.kv16 && plan_vec(s, sm).threads == kThreads) {
    for (int ms = kMaxSplits; !fits; ms = pl.splits / 2) {
      pl = plan_dec(s, sm, ms);
      fits = pl.scratch() <= room;
      if (pl.splits == 1) break;
    }
  }
  if (!fits) {
    for (int ms = kMaxSplits; !fits; ms = pl.splits / 2) {
      pl = plan_vec(s, sm, ms);
      fits = pl.scratch() <= room;
      if (pl.splits == 1) break;
    }
  }
  if (!fits) throw Error("attention " + dst.name + ": scratch memory too small");
  char* scratch = static_cast<char*>(c.scratch) + q8_bytes;
  p.ranges = pl.ranges_bytes ? reinterpret_cast<const int2*>(scratch) : nullptr;
  p.part_ml = pl.ml_bytes ? reinterpret_cast<float2*>(scratch + pl.ranges_bytes) : nullptr;
  p.part_o = pl.o_bytes ? reinterpret_cast<float*>(scratch + pl.ranges_bytes + pl.ml_bytes) : nullptr;
  p.splits = pl.splits;
  p.chunk = pl.chunk;
  p.strided = pl.strided;
  p.n_rchunks = pl.n_rchunks;
  // The 8-bit blocks for the product after: attn_combine writes them, or
  // attn_vec or attn_dec with one split.
  if (c.quantize_out) p.q8 = Q8Act::in(c.scratch, s.D * s.Hq, s.T);

  if (pl.ranges_bytes) {
    const bool m16 = aligned16(mask->data) && mask->nb[1] % 16 == 0;
    launch_kernel(attn_ranges, dim3(unsigned(s.T), unsigned(pl.n_rchunks)), 256, 0, c.stream, p.mask, p.m_nb1, p.S, m16,
                  const_cast<int2*>(p.ranges));
    WEIR_CUDA_CHECK_LAUNCH();
  }
  if (pl.mma) {
    const dim3 grid(unsigned(cdiv(p.rows, kBM)), unsigned(s.Hkv), unsigned(pl.splits));
    switch (s.D) {
      case 64: launch_mma<64>(p, grid, c.stream); break;
      case 128: launch_mma<128>(p, grid, c.stream); break;
      default: launch_mma<256>(p, grid, c.stream); break;
    }
  } else if (pl.dec) {
    const dim3 grid(unsigned(cdiv(p.rows, kDecRows)), unsigned(s.Hkv), unsigned(pl.splits));
    switch (s.D) {
      case 64: launch_dec<64>(p, grid, c.stream); break;
      case 128: launch_dec<128>(p, grid, c.stream); break;
      default: launch_dec<256>(p, grid, c.stream); break;
    }
  } else {
    const dim3 grid(unsigned(cdiv(p.rows, pl.R)), unsigned(s.Hkv), unsigned(pl.splits));
    switch (pl.L) {
      case 8: launch_vec_l<8>(p, pl.R, s.f16, pl.threads, grid, c.stream); break;
      case 16: launch_vec_l<16>(p, pl.R, s.f16, pl.threads, grid, c.stream); break;
      default: launch_vec_l<32>(p, pl.R, s.f16, pl.threads, grid, c.stream); break;
    }
  }
  WEIR_CUDA_CHECK_LAUNCH();
  if (pl.splits > 1) {
    launch_kernel(attn_combine, dim3(unsigned(s.T * s.Hq), unsigned(cdiv(s.D, 32))), kThreads, 0, c.stream, p);
    WEIR_CUDA_CHECK_LAUNCH();
  } else if (c.quantize_out && pl.mma) {
    q8_quantize_rows(dst, c);  // attn_mma's own output does not write them
    WEIR_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace weir::cuda
