#pragma once
// The attention kernels' shared pieces: limits, the launch parameters and
// warp reductions.
// Included by ops_attention.cu alone (its file comment describes the
// kernels and how they are planned).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/plan/attention_rules.h"
#include "backend/cuda/q8_act.cuh"

namespace weir::cuda::attention {

constexpr float kLog2e = 1.4426950408889634f;
// (kThreads, kMaxSplits, kRangeChunk, kBM, kDecRows and the other limits
// the plans share: plan/attention_rules.h.)

// The 8-bit cache's element type, as a tag (q8_0 blocks of kQ8Bytes).
struct Q8Block {};

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
  const float* sinks;        // F32 [Hq] or null: each head's sink logit (graph.h), in natural units
  float cap, inv_cap;        // the scores' soft cap (cap > 0; qscale is then the plain scale) or 0
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
// (warp_sum: cuda_util.cuh)

// A score q.k * qscale in log2 units: with a soft cap, q was scaled by the
// plain scale and the score becomes cap * tanh(score / cap), then log2 units.
__device__ __forceinline__ float capped_score(const Params& p, float s) {
  return p.cap > 0.f ? p.cap * kLog2e * tanhf(s * p.inv_cap) : s;
}

// 1 / the softmax's denominator of head h's row with running (max m, sum l)
// over all its keys (log2 units), the head's sink counted as one more key
// of no value: out = acc * this. A row that saw no key gives 0.
__device__ __forceinline__ float softmax_inverse(const Params& p, int h, float m, float l) {
  if (!p.sinks || m == -INFINITY) return l > 0.f ? 1.f / l : 0.f;
  const float sk = __ldg(p.sinks + h) * kLog2e, M = fmaxf(m, sk), a = fast_exp2(m - M);
  return a / fmaf(l, a, fast_exp2(sk - M));
}

// (cp.async, ldmatrix and mma.sync: mma_ptx.cuh)

}  // namespace weir::cuda::attention
