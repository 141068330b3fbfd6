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
// Scratch bytes for partial sums when blocks split K (a group splits K
// less when its partial sums would not fit).
size_t tile_scratch_bytes(const Tensor& dst);
// The most products on the same x that one launch takes.
int tile_max_group();
// dsts[j] = W_j x for the n products dsts[0..n) (same x, W type, K and T),
// one launch, with x given in fp16 (xh: rows of K); partial sums in scratch.
void tile_mul_mat(const Tensor* const* dsts, int n, const OpCtx& c, const __half* xh, void* scratch,
                  size_t scratch_bytes);

}  // namespace weir::cuda
