// The host side of the product kernels (mul_mat), shared by the rules
// (product_rules.cpp: the planner's questions in kernel_rules.h) and the
// launchers (ops_mul_mat*.cu): which kernel a product runs on and the
// memory it needs. Plain C++: no CUDA header.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cuda/plan/kernel_limits.h"
#include "backend/cuda_options.h"
#include "core/tensor.h"

namespace weir::cuda {

// ---- Which kernel ----
// The decode kernels take dst (at most kMaxVecTokens tokens): the 8-bit
// ones where W's type has them (has_q8_mat_vec), else the float one. From
// CudaOptions::mma_min_tokens tokens on, the MMA tile kernel's products
// (mma_tile_fits) go to it instead: its 16-token tiles read the weights
// once where the decode kernels' cost grows with T.
bool uses_vec(const Tensor& dst, const CudaOptions& o);
// Products of at most kMaxTwoRowTokens tokens run on the decode kernels
// whatever the options (mma_min_tokens is above): the fused launches (a
// GLU, a deferred norm, row jobs) that need the two-row warp ask this.
inline bool always_vec(const Tensor& dst) { return dst.n_rows() <= kMaxTwoRowTokens; }
// The smallest CudaOptions::mma_min_tokens taken (smaller: this).
inline constexpr int kMinMmaTokens = int(kMaxTwoRowTokens) + 1;
// The tile kernels take dst (more tokens, up to tile_max_tokens(), of a
// type they have).
bool uses_tile(const Tensor& dst, const CudaOptions& o);
// Whether W's type has integer (dp4a) decode kernels (the types
// dispatch_q8_dot instantiates, q8_dot.cuh).
bool has_q8_mat_vec(DType w);
// Products of more tokens than the decode kernels take, up to this many
// (WEIR_CUDA_TILE_MAX_TOKENS, default 64: at 128 cuBLAS on an fp16 copy of W
// is faster on an H100), run on the tile kernel; more go to cuBLAS.
int64_t tile_max_tokens(const CudaOptions& o);
// Whether W's type has the tile kernel (quantized types).
bool has_tile_mul_mat(DType w);
// Whether the MMA tile kernel takes dst (Q4_0, Q8_0, Q4_K, Q6_K; K a
// multiple of 256; WEIR_CUDA_TILE_MMA=0 turns it off for comparisons).
bool mma_tile_fits(const Tensor& dst, const CudaOptions& o);

// ---- Groups ----
int q8_max_group();    // the most products one 8-bit decode launch takes
int tile_max_group();  // the most products on the same x that one tile launch takes

// ---- Memory ----
// Scratch bytes for x quantized to 8 bits: T rows of K/32 blocks.
size_t q8_act_bytes(int64_t K, int64_t T);
// Steps of K of the WMMA tile kernel, and the most splits of K that
// scratch holds partial sums for (cols columns).
int64_t tile_k_steps(int64_t K);
int tile_max_splits(int64_t K, int64_t T, int64_t cols);
// Scratch bytes for partial sums when blocks split K (a group splits K
// less when its partial sums would not fit).
size_t tile_scratch_bytes(const Tensor& dst);
// Rows of W dequantized to fp16 at once for cuBLAS (kSliceBytes).
size_t slice_rows(const Tensor& dst);

// ---- Deferred norms (mul_mat_q8.h says how) ----
// The 8-bit kernels' deferred norm memory for K elements of T tokens: the
// 8-bit blocks, then the sums of squares (at norm_sums).
size_t deferred_norm_q8_bytes(int64_t K, int64_t T);
float* norm_sums(void* deferred_norm, int64_t K, int64_t T);
// Whether the 8-bit kernels can run this add+norm launch (can_defer_norm,
// kernel_rules.h).
bool q8_can_defer_norm(const Tensor& product, const Tensor& add, const Tensor& norm, const Tensor& mul);
// The same for the float kernel: its launch writes add's and mul's results
// (mul's not yet divided by rms) and its blocks' sums of squares into the
// deferred norm's memory; the products reading mul's result divide theirs
// by rms.
bool vec_can_defer_norm(const Tensor& product, const Tensor& add, const Tensor& norm, const Tensor& mul);
// The norm whose result x is (x = mul(rms_norm(s), w): what the float
// kernel's deferred norm takes), or null.
const Tensor* rms_norm_of(const Tensor& x);

}  // namespace weir::cuda
