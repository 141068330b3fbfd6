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
// c.scratch, unless c.x_from says the blocks are there already, or in
// c.deferred_norm or c.glu_q8), then integer dot products with the weights'
// quants (dp4a).
void q8_mat_vec(const Tensor* const* dsts, int n, const OpCtx& c);
// x (F32 rows, K a multiple of 32) quantized to 8 bits into c.scratch, as
// q8_mat_vec reads it with c.x_from Q8InScratch (for ops whose output a
// product reads that way but that cannot write the blocks themselves).
void q8_quantize_rows(const Tensor& x, const OpCtx& c);

// The deferred norm (docs/architecture.md's glossary): llama's
//   s = W a + r;  x = rms_norm(s) * w;  y_i = W_i x
// runs as two launches, not three. 8-bit quantization commutes with a
// positive scale (the quants of v / rms are those of v; the block's scale
// is divided by rms), and so does a product, so the add+norm launch of the
// product W a (32 rows a block: one 8-bit block of x) adds r, writes s, the
// 8-bit blocks of s * w (the norm's input times its weights, not yet divided
// by the rms) and each block's sum of squares of s into the deferred norm's
// memory (OpCtx::deferred_norm); the products W_i read those blocks as x
// and divide their results by the rms, summing the partials in a fixed
// order (results repeat bit for bit). No norm kernel runs: a third of the
// small kernels of a llama layer. At most kMaxTwoRowTokens (the add+norm
// launch takes two rows a warp); the rule and the memory:
// plan/product_rules.h (q8_can_defer_norm, deferred_norm_q8_bytes).
// The add+norm launch: writes add's result and the deferred norm; mul's
// result is not written (the products reading it read the deferred norm,
// OpCtx::x_from DeferredNorm).
void q8_mat_vec_add_norm(const Tensor& product, const Tensor& add, const Tensor& norm, const Tensor& mul,
                          const OpCtx& c);

// The GLU applied in the gate/up launch (plan/kernel_rules.h: can_fuse_glu):
// a warp takes gate rows j, j + 1 and up rows j, j + 1, a block of 16 warps
// 32 outputs, one 8-bit block of the next product's x (the GLU's 8-bit
// blocks, OpCtx::glu_q8); at most kMaxTwoRowTokens.
void q8_mat_vec_glu(const Tensor& a, const Tensor& b, const Tensor& glu, const OpCtx& c);

}  // namespace weir::cuda
