// Internal to ops_mul_mat*.cu: products of quantized weights for small
// batches on the tensor cores: the MMA tile kernel (W to fragments in
// registers, ops_mul_mat_mma.cu) where it fits, else the WMMA tile kernel
// (W dequantized in shared memory, ops_mul_mat_tile.cu).
#pragma once
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_ops.h"

namespace weir::cuda {

// Products of more tokens than the decode kernels take, up to this many
// (WEIR_CUDA_TILE_MAX_T, default 64: at 128 cuBLAS on an fp16 copy of W
// is faster on an H100), run on the tile kernel; more go to cuBLAS.
int64_t tile_max_tokens(const CudaOptions& o);
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

// Whether the MMA tile kernel takes dst (Q4_0, Q8_0, Q4_K, Q6_K; K a
// multiple of 256; WEIR_CUDA_TILE_MMA=0 turns it off for comparisons).
bool mma_tile_fits(const Tensor& dst, const CudaOptions& o);
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
