// Internal to the tile kernels (ops_mul_mat_tile.cu, ops_mul_mat_mma.cu):
// the products one launch takes (copies to shared memory: mma_ptx.cuh),
// split K's partial sums and how many splits to make.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/product_group.cuh"

namespace weir::cuda {

// Up to kMaxMats products on the same x in one launch (q, k and v; gate
// and up): blockIdx.x runs over the row blocks of each in turn. Split K's
// partial sums are kept as [split][T][cols], the products side by side
// (kMaxMats: product_group.cuh).
struct TileMats {
  const uint8_t* w[kMaxMats];
  size_t stride[kMaxMats];
  int64_t rows[kMaxMats];
  int64_t first_block[kMaxMats + 1];  // row blocks before each
  int64_t col[kMaxMats + 1];          // partial-sum columns before each
  float* y[kMaxMats];
  int64_t ldy[kMaxMats];
  int n;
};

// The products dsts[0..n) in row blocks of `rows`.
TileMats tile_mats(const Tensor* const* dsts, int n, int rows);

// The product of block blockIdx.x, its first row and row count.
__device__ __forceinline__ int tile_mat_of(const TileMats& m) {
  int mat = 0;
  while (mat + 1 < m.n && int64_t(blockIdx.x) >= m.first_block[mat + 1]) ++mat;
  return mat;
}

// y_j = the sum over S splits of the partial sums in part, s in order (so
// results do not depend on scheduling).
void sum_splits(const float* part, int S, int64_t T, const TileMats& m, const OpCtx& c);

// Splits of K (steps of K in all: steps) for `blocks` tiles on `slots`
// blocks in flight: few waves, little of them idle, and partial sums
// (T x cols floats a split) within part_bytes.
int tile_splits(int64_t blocks, int64_t slots, int64_t steps, int64_t T, int64_t cols, size_t weight_bytes,
                size_t part_bytes);


}  // namespace weir::cuda
