#pragma once
// attn_vec: attention on CUDA cores, for decode over short spans, F32
// caches and batched decode.
// Included by ops_attention.cu alone (its file comment describes the
// kernels and how they are planned).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/q8_act.cuh"

namespace weir::cuda::attention {

// 8 consecutive elements of a K or V row: elements 8 c .. 8 c + 7 of the
// row at `row` (a head's row of a cache cell).
template <typename KV>
struct Row8;

template <>
struct Row8<__half> {
  uint4 r;
  __device__ __forceinline__ void zero() { r = make_uint4(0, 0, 0, 0); }
  __device__ __forceinline__ void load(const char* row, int c, bool aligned) {
    const char* p = row + c * 16;
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
  __device__ __forceinline__ void load(const char* row, int c, bool aligned) {
    const float* f = reinterpret_cast<const float*>(row + c * 32);
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

// The 8-bit cache (q8_0 blocks of 34 bytes: 2-byte aligned): the block's
// half scale and 8 of its quants, read as 2-byte words.
template <>
struct Row8<Q8Block> {
  uint32_t q0, q1;
  float d;
  __device__ __forceinline__ void zero() { q0 = q1 = 0, d = 0.f; }
  __device__ __forceinline__ void load(const char* row, int c, bool) {
    const unsigned short* s = reinterpret_cast<const unsigned short*>(row + (c >> 2) * kQ8Bytes);
    const int w = 1 + (c & 3) * 4;  // the first quant's word
    d = __half2float(__ushort_as_half(__ldg(s)));
    q0 = uint32_t(__ldg(s + w)) | uint32_t(__ldg(s + w + 1)) << 16;
    q1 = uint32_t(__ldg(s + w + 2)) | uint32_t(__ldg(s + w + 3)) << 16;
  }
  __device__ __forceinline__ void get(float (&f)[8]) const {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      f[e] = d * float(int8_t(q0 >> (8 * e)));
      f[4 + e] = d * float(int8_t(q1 >> (8 * e)));
    }
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
  constexpr int KPT = (std::is_same_v<KV, float> ? 4 : 8) / (R == 8 ? 2 : 1);  // keys per thread per tile
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

  const char* kbase = p.k + int64_t(g) * p.k_nb1;
  const char* vbase = p.v + int64_t(g) * p.v_nb1;
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
          kr[i].load(kbase + j * p.k_nb2, c, p.kv16);
          vr[i].load(vbase + j * p.v_nb2, c, p.kv16);
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
        if (c < R) sh[rr * TK + i * NKG + kg] = mv[i] == -INFINITY ? -INFINITY : fmaf(mv[i], kLog2e, capped_score(p, part[0]));
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
      const float o = s * softmax_inverse(p, h, m_s[r], l_s[r]);
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

}  // namespace weir::cuda::attention
