// Internal to ops_mul_mat*.cu: products of quantized weights for small
// batches on the tensor cores, dequantizing W in shared memory.
#pragma once
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_ops.h"

namespace weir::cuda {

// Products of more tokens than the decode kernels take, up to this many
// (WEIR_CUDA_TILE_MAX_T, default 64: at 128 cuBLAS on an fp16 copy of W
// is faster on an H100), run on the tile kernel; more go to cuBLAS.
int64_t tile_max_tokens();
// Whether W's type has the tile kernel (quantized types).
bool has_tile_mul_mat(DType w);
// Scratch bytes for partial sums when blocks split K.
size_t tile_scratch_bytes(const Tensor& dst);
// dst = W x with x given in fp16 (xh: rows of K); partial sums in scratch.
void tile_mul_mat(const Tensor& dst, const OpCtx& c, const __half* xh, void* scratch, size_t scratch_bytes);

}  // namespace weir::cuda
