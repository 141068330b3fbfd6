// Internal to the CUDA backend: the decode products on 8-bit activations.
#pragma once
#include <cstddef>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/plan/product_rules.h"

namespace weir::cuda {

// (Which products they take and the memory they need: plan/product_rules.h;
// kMaxQ8Tokens: plan/kernel_limits.h.)
// y_i = W_i x for the n products dsts[0..n) (same x, W type and K; T <= 8
// tokens) in one launch: x quantized to 8 bits per 32 elements (into
// c.scratch, unless c.x_q8_in_scratch), then integer dot products with the
// weights' quants (dp4a).
void q8_mat_vec(const Tensor* const* dsts, int n, const OpCtx& c);
// x (F32 rows, K a multiple of 32) quantized to 8 bits into c.scratch, as
// q8_mat_vec reads it with c.x_q8_in_scratch (for ops that hand their output to
// a product that way but cannot write the blocks themselves).
void q8_quantize_rows(const Tensor& x, const OpCtx& c);

// The residual norm folded into the products around it: llama's
//   s = W a + r;  x = rms_norm(s) * w;  y_i = W_i x
// runs as two launches, not three. 8-bit quantization commutes with a
// positive scale (the quants of v / rms are those of v; the block's scale
// is divided by rms), and so does a product, so the product W a (32 rows a
// block: one 8-bit block of x) adds r, writes s, the 8-bit blocks of s * w
// and each block's sum of squares of s into fold memory; the products W_i
// read those blocks as x and multiply their results by 1 / rms, summing the
// partials in a fixed order (results repeat bit for bit). No norm kernel
// runs: a third of the small kernels of a llama layer. At most
// kMaxFoldTokens (the producer takes two rows a warp); the rule and the
// memory: plan/product_rules.h (q8_can_defer_norm, deferred_norm_q8_bytes).
// The launch: writes add's result and the fold;
// mul's result is not written (the products reading it take the fold,
// OpCtx::x_norm_deferred).
void q8_mat_vec_add_norm(const Tensor& product, const Tensor& add, const Tensor& norm, const Tensor& mul,
                          const OpCtx& c);

// The GLU applied in the gate/up launch (cuda_ops.h: can_fuse_glu): a warp
// takes gate rows j, j + 1 and up rows j, j + 1, a block of 16 warps 32
// outputs, one 8-bit block of the next product's x; at most kMaxFoldTokens.
void q8_mat_vec_glu(const Tensor& a, const Tensor& b, const Tensor& glu, const OpCtx& c);

}  // namespace weir::cuda
