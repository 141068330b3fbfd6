#pragma once
// attn_mma: FlashAttention-2 style attention on tensor cores, for prefill.
// Included by ops_attention.cu alone (its file comment describes the
// kernels and how they are planned).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "backend/cuda/attention_common.cuh"

namespace weir::cuda::attention {

template <int D>
struct MmaCfg {
  static constexpr int BN = mma_keys_per_tile(D);             // keys per tile (plan/attention_rules.h)
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
          s[nt][e] = mk[nt][e] == -INFINITY ? -INFINITY : fmaf(mk[nt][e], kLog2e, capped_score(p, s[nt][e]));
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
      const float inv = softmax_inverse(p, h, m, l);
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

}  // namespace weir::cuda::attention
