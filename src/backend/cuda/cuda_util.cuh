// Small pieces shared by the CUDA kernels (not an interface).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/tensor.h"

namespace weir::cuda {

// Tensor strides for kernels: row r of a [ne0, ne1, ne2, ne3] tensor is at
// byte offset (r % ne1) * nb1 + (r / ne1 % ne2) * nb2 + (r / (ne1 ne2)) * nb3.
struct Rows {
  const char* base;
  int64_t ne1, ne2;
  int64_t nb1, nb2, nb3;
  __device__ __forceinline__ const char* row(int64_t r) const {
    const int64_t i1 = r % ne1, i2 = (r / ne1) % ne2, i3 = r / (ne1 * ne2);
    return base + i1 * nb1 + i2 * nb2 + i3 * nb3;
  }
};
inline Rows rows_of(const Tensor& t) {
  return {static_cast<const char*>(t.data), t.ne[1], t.ne[2], int64_t(t.nb[1]), int64_t(t.nb[2]), int64_t(t.nb[3])};
}

inline std::string shape_of(const Tensor& t) {
  return t.name + "[" + std::to_string(t.ne[0]) + "," + std::to_string(t.ne[1]) + "," + std::to_string(t.ne[2]) +
         "," + std::to_string(t.ne[3]) + "]";
}

[[noreturn]] inline void bad_operands(const char* op, const Tensor& dst, const std::string& why) {
  throw Error(std::string("cuda ") + op + " " + dst.name + ": " + why);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

inline unsigned blocks_for(int64_t n, int per_block) { return unsigned((n + per_block - 1) / per_block); }

}  // namespace weir::cuda
