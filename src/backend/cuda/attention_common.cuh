#pragma once
// The attention kernels' shared pieces: limits, the launch parameters,
// warp reductions, and the cp.async, ldmatrix and mma.sync wrappers of the
// tensor-core kernels (sm_80+).
// Included by ops_attention.cu alone (its file comment describes the
// kernels and how they are planned).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/q8_act.cuh"

namespace weir::cuda::attention {

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
// (warp_sum: cuda_util.cuh)

// ---------------------------------------------------------------------------
// Tensor-core helpers (sm_80+).
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

}  // namespace weir::cuda::attention
