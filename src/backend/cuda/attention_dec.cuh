#pragma once
// attn_dec: decode over long spans on tensor cores.
// Included by ops_attention.cu alone (its file comment describes the
// kernels and how they are planned).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/cluster_ptx.cuh"
#include "backend/cuda/q8_act.cuh"

namespace weir::cuda::attention {

// attn_dec: decode on tensor cores (F16 caches, D in {64, 128, 256}, at most
// 8 query rows a block: the G heads of a kv head for one token or a few).
// attn_vec's per-key work (a dot of R rows on 8-dim slices, a butterfly
// across lanes, the p v sums) costs more issue slots than the keys take to
// arrive: at depth 4,096 it streams at ~30% of DRAM bandwidth. Here the warps
// of a block split each key tile (16 keys a warp), S = Q K^T by mma m16n8k16
// (Q's fragments in registers, rows 8-15 zero: the m16 shape's unused half)
// and O^T += V^T P^T with the rows as the mma's n8 (the accumulator holds the
// 8 rows, none wasted; P's fragment of S is the B operand as it lies). Each
// warp keeps its own running (max, sum) and O; the warps merge at the end
// through shared memory.
// Key tiles go through NST stages of shared memory by cp.async (NST - 1
// in flight while one is computed). Splits are strided as attn_vec's: split
// s takes tiles s, s + n, ... and skips those whose keys are all masked
// (scanned before pdl_wait() where the mask is fixed).
// Splits are merged by attn_combine after the launch, or, with CL, inside
// it: the splits of a (row block, kv head) are one thread-block cluster
// (splits = the cluster's size, at most 16), each block leaves its partial
// in its shared memory, and after a cluster barrier each block merges a
// share of the outputs reading the others' partials (distributed shared
// memory): no merging launch, no partials through global memory.
// An 8-bit cache (KV = Q8Block: q8_0 blocks, 34 bytes a 32 elements) goes
// through the stages as it lies (a tile's rows of blocks, copied in pieces
// of CW bytes: the widest the rows' alignment allows), and each warp turns
// its 16 keys of the stage into halves in one tile of shared memory (its
// own rows: no barrier but the stage's) before the same mma code reads
// them: half of F16's bytes from memory, the same tensor-core work.
// Grid (row blocks of 8, Hkv, splits), DecCfg<D>::TH threads, dynamic
// shared memory DecCfg<D>::smem_bytes(NST) (F16) or q8_smem_bytes(NST);
// with CL, clusters (1, 1, splits).
template <int D>
struct DecCfg {
  static constexpr int NW = dec_warps(D);  // warps, 16 keys of a tile each (plan/attention_rules.h)
  static constexpr int TH = NW * 32;
  static constexpr int BN = 16 * NW;  // keys per tile
  static_assert(TH == dec_threads(D) && BN == dec_keys_per_tile(D), "the plans' tiles are the kernel's");
  static constexpr int LD = D + 8;    // shared row stride in halves (conflict-free ldmatrix)
  static constexpr int OLD = D + 4;   // the warps' outputs at the merge, floats
  static constexpr int stage_bytes = 2 * BN * LD * 2;  // K and V of a tile
  static constexpr int smem_bytes(int nst) { return nst * stage_bytes; }
  // 8-bit caches: a head row of blocks, copied CW bytes at a time (its
  // rows are CW-aligned in a cache of whole heads: 272, 136, 68 bytes).
  static constexpr int RB = D / 32 * kQ8Bytes;
  static constexpr int CW = D == 256 ? 16 : D == 128 ? 8 : 4;
  static constexpr int raw_stage_bytes = 2 * BN * RB;  // K and V of a tile as blocks
  static constexpr int q8_smem_bytes(int nst) { return stage_bytes + nst * raw_stage_bytes; }
  static_assert(RB % CW == 0 && (BN * RB) % 16 == 0, "copies tile the rows; stages stay 16-byte aligned");
  // At the end the stages hold the warps' outputs and (max, sum), then the
  // block's partial and its (max, sum) (read by the cluster's blocks).
  static constexpr int merge_bytes = NW * kDecRows * (OLD * 4 + 8) + kDecRows * (D * 4 + 8);
  static_assert(merge_bytes <= smem_bytes(2), "merge buffers fit the stages");
  static_assert(merge_bytes <= stage_bytes, "8-bit caches: the merge buffers fit the tile of halves");
};

// 8 quants (lo: 4, hi: 4) of a block times its scale d, as 8 halves: each
// byte (plus 128) in the mantissa of 1024 gives 1152 + q exactly, less 1152
// is q, times d rounds once (half(d * q), as a float product rounded).
__device__ __forceinline__ uint4 q8_to_halves(uint32_t lo, uint32_t hi, __half2 d) {
  const __half2 bias = __half2half2(__ushort_as_half(0x6480));  // 1152
  lo ^= 0x80808080u, hi ^= 0x80808080u;
  const auto h = [&](uint32_t w, uint32_t sel) {
    const uint32_t b = __byte_perm(w, 0x64646464u, sel);
    const __half2 x = __hmul2(__hsub2(*reinterpret_cast<const __half2*>(&b), bias), d);
    return *reinterpret_cast<const uint32_t*>(&x);
  };
  return make_uint4(h(lo, 0x4140), h(lo, 0x4342), h(hi, 0x4140), h(hi, 0x4342));
}

template <int D, int NST, bool CL, typename KV = __half>
__global__ void __launch_bounds__(DecCfg<D>::TH) attn_dec(const Params p) {
  static_assert(NST >= 2, "at least double-buffered");
  using C = DecCfg<D>;
  constexpr bool Q8 = std::is_same_v<KV, Q8Block>;
  constexpr int NW = C::NW, TH = C::TH, BN = C::BN, LD = C::LD, CH = D / 8, DT = D / 16;
  constexpr int NT16 = Q8 ? 1 : NST;  // tiles of halves (8-bit: one, each warp's own rows)
  extern __shared__ __align__(16) unsigned char smem[];
  __half* Ks = reinterpret_cast<__half*>(smem);
  __half* Vs = Ks + NT16 * BN * LD;
  unsigned char* raw = smem + C::stage_bytes;  // 8-bit: the stages of blocks
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
  const auto load_tile_q8 = [&](int u, int st) {
    constexpr int PR = C::RB / C::CW, N = BN * PR;  // pieces a row, a tile
    const int k0 = (split + u * p.splits) * BN;
    const uint32_t ks = smem_u32(raw + st * C::raw_stage_bytes), vs = ks + BN * C::RB;
#pragma unroll
    for (int i = tid; i < N; i += TH) {
      const int r = i / PR, off = (i % PR) * C::CW;
      const bool ok = k0 + r < S;  // else zeros, from a valid address
      const int64_t key = k0 + r;
      cp_async<C::CW>(ks + r * C::RB + off, ok ? kg_base + key * p.k_nb2 + off : kg_base, ok ? C::CW : 0);
      cp_async<C::CW>(vs + r * C::RB + off, ok ? vg_base + key * p.v_nb2 + off : vg_base, ok ? C::CW : 0);
    }
  };
  // 8-bit: this warp's 16 keys of stage st as halves (the tile's rows 16
  // warp ..), a lane 8 dims of a key at a time.
  const auto to_halves = [&](int st) {
    const unsigned char* rk = raw + st * C::raw_stage_bytes;
#pragma unroll 2
    for (int i = lane; i < 16 * CH; i += 32) {
      const int r = warp * 16 + i / CH, gi = i % CH;
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const unsigned char* blk = rk + m * BN * C::RB + r * C::RB + (gi >> 2) * kQ8Bytes;
        const unsigned short* w = reinterpret_cast<const unsigned short*>(blk + 2 + (gi & 3) * 8);
        const uint32_t lo = uint32_t(w[0]) | uint32_t(w[1]) << 16, hi = uint32_t(w[2]) | uint32_t(w[3]) << 16;
        const uint4 h = q8_to_halves(lo, hi, __half2half2(*reinterpret_cast<const __half*>(blk)));
        *reinterpret_cast<uint4*>((m ? Vs : Ks) + r * LD + gi * 8) = h;
      }
    }
    __syncwarp();
  };
  const auto load_tile = [&](int u, int st) {
    if constexpr (Q8) {
      load_tile_q8(u, st);
    } else {
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
    }
  };
  // u: the tile computed next; ul: the next to load, NST - 1 ahead.
  int u = next(0), ul = u;
#pragma unroll
  for (int st = 0; st < NST - 1; ++st) {
    if (ul >= 0) load_tile(ul, st), ul = next(ul + 1);
    cp_async_commit();
  }

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
    const int st = it % NST;
    if (ul >= 0) load_tile(ul, (it + NST - 1) % NST), ul = next(ul + 1);
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
    cp_async_wait<NST - 1>();
    __syncthreads();
    if constexpr (Q8) to_halves(st);
    const uint32_t stage_off = Q8 ? 0u : uint32_t(st * BN * LD * 2);
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
        s[nt][e] = mk[nt][e] == -INFINITY ? -INFINITY : fmaf(mk[nt][e], kLog2e, capped_score(p, s[nt][e]));
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
    u = next(u + 1);
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
  // With CL, the block's partial for the cluster: [row][D] and (max, sum).
  float* cpo = reinterpret_cast<float*>(mlsh + NW * kDecRows);
  float2* cml = reinterpret_cast<float2*>(cpo + kDecRows * D);
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
    if (CL) {
      cpo[i] = acc;
      if (d == 0) cml[r] = make_float2(M, L);
    } else if (p.splits == 1) {
      const float out = acc * softmax_inverse(p, h, M, L);
      p.out[t * p.o_nb1 + int64_t(h) * D + d] = out;
      if (p.q8.q) q8_store_block(p.q8, t, (int64_t(h) * D + d) / 32, out);  // D % 32 == 0
    } else {  // attn_combine reads no output of a split that saw no key (max -inf)
      const int64_t pr = (int64_t(split) * p.T + t) * p.Hq + h;
      if (M != -INFINITY) p.part_o[pr * D + d] = acc;
      if (d == 0) p.part_ml[pr] = make_float2(M, L);
    }
  }
  if constexpr (CL) {
    cluster_sync();
    // Warp w of block (rank) k merges 32 outputs (one 8-bit block of the
    // product's x): job w * splits + k, then every splits * NW-th.
    const int ns = p.splits;
    for (int j = warp * ns + int(cluster_rank()); j < nr * D / 32; j += ns * NW) {
      const int i = j * 32 + lane, r = i / D;
      // Every block's (max, sum) and value first, all loads in flight at
      // once (one round trip to the other SMs, not one a block: the merge
      // took ~4 us a layer with the loads one after another).
      float2 ml[kMaxClusterBlocks];
      float v[kMaxClusterBlocks];
#pragma unroll
      for (int k = 0; k < kMaxClusterBlocks; ++k)
        if (k < ns) ml[k] = cluster_peer(cml, unsigned(k))[r], v[k] = cluster_peer(cpo, unsigned(k))[i];
      float M = -INFINITY;
#pragma unroll
      for (int k = 0; k < kMaxClusterBlocks; ++k)
        if (k < ns) M = fmaxf(M, ml[k].x);
      const float mu = M == -INFINITY ? 0.f : M;
      float acc = 0.f, L = 0.f;
#pragma unroll
      for (int k = 0; k < kMaxClusterBlocks; ++k)
        if (k < ns) {
          const float wt = fast_exp2(ml[k].x - mu);  // 0 for a split that saw no key
          acc = fmaf(wt, v[k], acc);
          L = fmaf(wt, ml[k].y, L);
        }
      const int d = i - r * D;
      const int row = row0 + r, t = row / G, h = g * G + row % G;
      const float out = acc * softmax_inverse(p, h, M, L);
      p.out[t * p.o_nb1 + int64_t(h) * D + d] = out;
      if (p.q8.q) q8_store_block(p.q8, t, (int64_t(h) * D + d) / 32, out);
    }
    cluster_sync();  // the others' partials are read: they may leave
  }
}

}  // namespace weir::cuda::attention
