// Up to kMaxMats products on the same x in one launch (q, k and v; gate
// and up): their weight rows one after the other, each matrix with its own
// output. The decode kernels (ops_mul_mat_q8.cu, ops_mul_mat.cu) find a
// row's matrix with locate().
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/plan/kernel_limits.h"

namespace weir::cuda {

// (kMaxMats: plan/kernel_limits.h.)
struct Mats {
  const uint8_t* w[kMaxMats];
  size_t stride[kMaxMats];
  int64_t rows[kMaxMats];
  float* y[kMaxMats];
  int64_t ldy[kMaxMats];
  int n;
  int64_t total;  // rows of all of them
};

// The group of the products dsts[0..n): the same x, weight type, K and
// tokens, weight rows `align`-byte aligned (checked: bad_operands).
inline Mats group_mats(const Tensor* const* dsts, int n, size_t align = 1) {
  const Tensor& dst = *dsts[0];
  const Tensor& W = *dst.src[0];
  if (n < 1 || n > kMaxMats) bad_operands("mul_mat", dst, "bad product group");
  Mats m{};
  m.n = n;
  for (int i = 0; i < n; ++i) {
    const Tensor& d = *dsts[i];
    const Tensor& Wi = *d.src[0];
    if (Wi.dtype != W.dtype || Wi.ne[0] != W.ne[0] || d.n_rows() != dst.n_rows() || d.src[1] != dst.src[1])
      bad_operands("mul_mat", d, "cannot run in one launch with " + dst.name);
    if (reinterpret_cast<uintptr_t>(Wi.data) % align || Wi.nb[1] % align)
      bad_operands("mul_mat", d, "weight rows are not " + std::to_string(align) + "-byte aligned");
    m.w[i] = static_cast<const uint8_t*>(Wi.data);
    m.stride[i] = Wi.nb[1];
    m.rows[i] = Wi.ne[1];
    m.y[i] = static_cast<float*>(d.data);
    m.ldy[i] = int64_t(d.nb[1] / 4);
    m.total += Wi.ne[1];
  }
  return m;
}

// Row `row` of the group: its matrix's weights, output and output stride.
// (Chains of selects, not an index into the parameter arrays: an index
// would copy them to local memory.)
__device__ __forceinline__ void locate(const Mats& m, int64_t row, const uint8_t** w, float** y, int64_t* ldy) {
  int mi = 0;
#pragma unroll
  for (int j = 0; j < kMaxMats - 1; ++j)
    if (mi == j && j + 1 < m.n && row >= m.rows[j]) row -= m.rows[j], mi = j + 1;
  *w = (mi == 0   ? m.w[0]
        : mi == 1 ? m.w[1]
                  : m.w[2]) +
       size_t(row) * (mi == 0   ? m.stride[0]
                      : mi == 1 ? m.stride[1]
                                : m.stride[2]);
  *y = (mi == 0 ? m.y[0] : mi == 1 ? m.y[1] : m.y[2]) + row;
  *ldy = mi == 0 ? m.ldy[0] : mi == 1 ? m.ldy[1] : m.ldy[2];
}

// Row `row` of the group: its matrix and its row there.
__device__ __forceinline__ void which(const Mats& m, int64_t row, int* mi, int64_t* local) {
  *mi = 0;
#pragma unroll
  for (int j = 0; j < kMaxMats - 1; ++j)
    if (*mi == j && j + 1 < m.n && row >= m.rows[j]) row -= m.rows[j], *mi = j + 1;
  *local = row;
}

}  // namespace weir::cuda
