// Activations quantized to 8 bits for the decode products (llama.cpp's
// Q8_1 values): per 32 elements a scale d and d * (sum of the quants). The
// quants ([T][K] int8) come first in the scratch, then the (d, d * sum)
// pairs ([T][K/32] half2). The products read them (ops_mul_mat_q8.cu); the
// kernel that makes x can write them too (a norm, a GLU), saving a launch.
#pragma once
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/plan/kernel_limits.h"

namespace weir::cuda {

// (kQ8Bytes, q8_quant_bytes and the pairs' size: plan/kernel_limits.h.)
static_assert(sizeof(__half2) == kQ8PairBytes, "a block's (d, d * sum) is one __half2");

struct Q8Act {
  int8_t* q = nullptr;  // null: no quantized copy wanted
  __half2* ds = nullptr;
  int64_t K = 0;
  static Q8Act in(void* scratch, int64_t K, int64_t T) {
    return {static_cast<int8_t*>(scratch),
            reinterpret_cast<__half2*>(static_cast<char*>(scratch) + q8_quant_bytes(K, T)), K};
  }
};

// Lane l of a full warp holds element 32 b + l of row t: the warp writes the
// block's quants and its (d, d * sum).
__device__ __forceinline__ void q8_store_block(const Q8Act& a, int64_t t, int64_t b, float v) {
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.0f;
  const int qv = amax == 0.0f ? 0 : __float2int_rn(v / d);
  int sum = qv;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const int lane = threadIdx.x & 31;
  a.q[t * a.K + b * 32 + lane] = int8_t(qv);
  if (lane == 0) a.ds[t * (a.K / 32) + b] = __floats2half2_rn(d, d * float(sum));
}

// Four consecutive elements per lane (element 4 i4 .. 4 i4 + 3 of row t),
// 8 lanes (i4 % 8 == lane % 8) to a block: the same as q8_store_block. Every
// lane of the warp calls it; only `active` lanes store (whole groups of 8).
__device__ __forceinline__ void q8_store4(const Q8Act& a, int64_t t, int64_t i4, float4 v, bool active) {
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.0f;
  const bool zero = amax == 0.0f;
  const int q0 = zero ? 0 : __float2int_rn(v.x / d), q1 = zero ? 0 : __float2int_rn(v.y / d);
  const int q2 = zero ? 0 : __float2int_rn(v.z / d), q3 = zero ? 0 : __float2int_rn(v.w / d);
  int sum = q0 + q1 + q2 + q3;
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (!active) return;
  *reinterpret_cast<char4*>(a.q + t * a.K + 4 * i4) = make_char4(char(q0), char(q1), char(q2), char(q3));
  if ((i4 & 7) == 0) a.ds[t * (a.K / 32) + i4 / 8] = __floats2half2_rn(d, d * float(sum));
}

}  // namespace weir::cuda
