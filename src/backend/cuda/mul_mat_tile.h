// Internal to ops_mul_mat*.cu: products of quantized weights for small
// batches on the tensor cores: the MMA tile kernel (W to fragments in
// registers, ops_mul_mat_mma.cu) where it fits, else the WMMA tile kernel
// (W dequantized in shared memory, ops_mul_mat_tile.cu).
#pragma once
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/plan/product_rules.h"

namespace weir::cuda {

// (Which products they take and the scratch they need: plan/product_rules.h
// (tile_max_tokens, has_tile_mul_mat, mma_tile_fits, tile_scratch_bytes).)
// dsts[j] = W_j x for the n products dsts[0..n) (same x, W type, K and T),
// one launch, with x given in fp16 (xh: rows of K); partial sums in scratch.
void tile_mul_mat(const Tensor* const* dsts, int n, const OpCtx& c, const __half* xh, void* scratch,
                  size_t scratch_bytes);

// x as fp16, permuted as the MMA tile kernel reads it, rows of K at the
// start of c.scratch; returns the bytes they take, rounded up to 256.
size_t mma_convert_x(const Tensor& x, int64_t K, int64_t T, const OpCtx& c);
// The experts' products on the MMA tile kernel (moe_ops.h): tiles of up to
// 64 (slot, token) pairs of one expert (tile[i] = (expert or -1, first
// index into order, pairs, 0), count of them on the device), x rows of
// pair p: p / k where every slot reads its token's x (x_per_token 1), else
// p; y [N, pairs]. W: [K, N, E] of row and expert strides; xh from
// mma_convert_x (all x rows).
struct MmaExperts {
  const uint8_t* w;
  size_t row_stride, expert_stride;
  int64_t K, N;
  const __half* xh;
  int k, x_per_token;
  const int32_t* order;
  const int4* tile;
  const int* count;
  float* y;
};
void mma_expert_mul_mat(const MmaExperts& a, DType wt, unsigned max_tiles, const OpCtx& c);
// As tile_mul_mat, on the MMA tile kernel; xh from mma_convert_x.
void mma_tile_mul_mat(const Tensor* const* dsts, int n, const OpCtx& c, const __half* xh, void* scratch,
                      size_t scratch_bytes);

}  // namespace weir::cuda
