// Internal to the CUDA backend: the decode products on 8-bit activations.
#pragma once
#include <cstddef>

#include "backend/cuda/cuda_ops.h"

namespace weir::cuda {

// The most tokens the 8-bit decode products take.
inline constexpr int64_t kMaxQ8Tokens = 8;
// Whether W's type has integer (dp4a) decode kernels.
bool has_q8_mat_vec(DType w);
// Scratch bytes for x quantized to 8 bits: T rows of K/32 blocks.
size_t q8_act_bytes(int64_t K, int64_t T);
// y_i = W_i x for the n products dsts[0..n) (same x, W type and K; T <= 8
// tokens) in one launch: x quantized to 8 bits per 32 elements (into
// c.scratch, unless c.x_quantized), then integer dot products with the
// weights' quants (dp4a).
void q8_mat_vec(const Tensor* const* dsts, int n, const OpCtx& c);
// x (F32 rows, K a multiple of 32) quantized to 8 bits into c.scratch, as
// q8_mat_vec reads it with c.x_quantized (for ops that hand their output to
// a product that way but cannot write the blocks themselves).
void q8_quantize_rows(const Tensor& x, const OpCtx& c);
// The most products one launch takes.
int q8_max_group();

}  // namespace weir::cuda
