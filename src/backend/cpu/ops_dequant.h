// Row dequantization for the CPU kernels (internal to backend/cpu).
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace weir::cpu {

// Dequantizes n_rows rows of k elements of dtype t: row r is read from
// src + r * src_stride bytes and written to dst + r * ld floats. The result
// is bit-identical to weir::dequantize_row (tests check it); the common
// formats (f32, f16, bf16, q4_0, q5_0, q8_0, q4_K, q6_K) have vectorized
// versions, the others go through dequantize_row.
void dequantize_rows(DType t, const void* src, size_t src_stride, int64_t n_rows, int64_t k,
                     float* dst, size_t ld);

// Whether dequantize_rows has a vectorized version for t.
bool has_fast_dequantize(DType t);

}  // namespace weir::cpu
