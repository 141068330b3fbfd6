// A rope or a set_rows as a job that writes values where the op's result
// goes (internal to the CUDA backend): the rope_store launch runs several
// of them (ops_rope.cu), and a decode product can run them on its own
// results instead of storing them (q, k and v roped and written into the KV
// cache by the launch that computes them: ops_mul_mat_q8.cu).
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/q8_act.cuh"

namespace weir::cuda {

// sin and cos of pair p's angle at position pos, built as the CPU reference
// builds it (backend/cpu/ops_rope.cpp): float(pos) times theta_scale =
// powf(base, -2/n_rot) once per pair index, divided by the pair's frequency
// factor, times freq_scale; the repeated products make the angles agree with
// the CPU's to the last bits.
__device__ __forceinline__ void rope_angle(int32_t pos, int p, float theta_scale, float freq_scale, const float* ff,
                                           float* s, float* c) {
  float theta = float(pos);
  for (int k = 0; k < p; ++k) theta *= theta_scale;
  sincosf(freq_scale * (ff ? theta / ff[p] : theta), s, c);
}

// A job writes element a of head h of token t to out + (idx ? idx[t] : t) *
// out_t + h * out_h + a * (f16 ? 2 : 4): a rope's result, or rows of a cache
// (set_rows, or a rope written straight into the KV cache when set_rows was
// its only reader). An 8-bit cache (q8) holds 32-element blocks instead
// (element a in block a / 32 of the head, kQ8Bytes a block): its writers
// write whole blocks from a warp's lanes (put_q8).
struct RopeJob {
  Rows x;  // rope: row h + H t of [D, H, T]; copy: row t of [D, T] (H = 1)
  char* out;
  int64_t out_t, out_h;
  const int32_t* idx;  // cache rows, or null
  int64_t n_out_rows;  // rows of the cache (idx out of range: skipped)
  bool f16;
  bool q8;  // out holds q8_0 blocks (put_q8, never put)
  int64_t D, H, T;
  bool rope;
  const int32_t* pos;
  const float* ff;
  int n_rot, step, other;
  float theta_scale, freq_scale;
  int64_t items;  // rope: pairs; copy: elements
  const float* nw;  // rope: x's rows rms-normalized (eps neps) and times nw first; null: not
  float neps;
  float oscale;  // rope: its results times this (1: as they are)
  const float* bias;  // added to x's elements first (element h D + a of a row; copy: a); null: none
};

__device__ __forceinline__ void put(const RopeJob& J, int64_t t, int64_t h, int64_t a, float v) {
  int64_t row = t;
  if (J.idx) {
    row = J.idx[t];
    if (row < 0 || row >= J.n_out_rows) return;
  }
  char* p = J.out + row * J.out_t + h * J.out_h;
  if (J.f16)
    reinterpret_cast<__half*>(p)[a] = __float2half_rn(v);
  else
    reinterpret_cast<float*>(p)[a] = v;
}

// The 8-bit cache's blocks (GGUF's q8_0: kQ8Bytes, a half scale d and 32
// int8 quants), made as the CPU's reference quantizer makes them
// (core/quant): d = amax / 127, q = round(x * (1 / d)) with ties away from
// zero, so both backends write the same bytes. Lanes in groups of 32 / E
// (aligned in the warp) each hold E consecutive elements of one block, a
// the first of them; every lane of the warp calls it (the groups' maxima
// are shuffles); lanes whose cache row is out of range write nothing.
template <int E>
__device__ __forceinline__ void put_q8(const RopeJob& J, int64_t t, int64_t h, int64_t a, const float (&v)[E]) {
  float amax = 0.0f;
#pragma unroll
  for (int e = 0; e < E; ++e) amax = fmaxf(amax, fabsf(v[e]));
#pragma unroll
  for (int o = 1; o < 32 / E; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  int64_t row = t;
  if (J.idx) {
    row = J.idx[t];
    if (row < 0 || row >= J.n_out_rows) return;
  }
  const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  char* blk = J.out + row * J.out_t + h * J.out_h + (a / 32) * kQ8Bytes;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const float r = roundf(v[e] * id);  // NaN: 0, as the CPU's
    blk[2 + a % 32 + e] = char(r == r ? int(fminf(fmaxf(r, -127.0f), 127.0f)) : 0);
  }
  if (a % 32 == 0) *reinterpret_cast<__half*>(blk) = __float2half_rn(d);
}

// The job of a rope (written into `into`'s cache when given) or set_rows
// node; throws on operands the kernels do not take.
RopeJob make_rope_job(const RopeStoreNode& n);

}  // namespace weir::cuda
