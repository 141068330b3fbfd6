// Internal to the CUDA backend: the mixture-of-experts launchers (the ops'
// semantics: core/graph.h). mul_mat_id reads only the chosen experts' rows,
// the experts read from ids on the device.
#pragma once
#include <cstddef>

#include "backend/cuda/cuda_ops.h"

namespace weir::cuda {

// ops_moe.cu
void op_top_k(const Tensor& dst, const OpCtx& c);
void op_moe_weights(const Tensor& dst, const OpCtx& c);
void op_route(const Tensor& top_k, const Tensor& weights, const OpCtx& c);
void op_mul_mat_id(const Tensor& dst, const OpCtx& c);  // the 8-bit kernels where has_expert_q8
void op_moe_sum(const Tensor& dst, const OpCtx& c);

// ops_moe_q8.cu: on 8-bit activations (the integer weight types; K and N
// multiples of 32). A block a (slot, token) pair for few pairs (decode);
// for more, the pairs sorted by expert on the device and each expert's
// rows read once for up to 8 of its pairs, or on the tensor cores for up to
// 64 (expert_mma). Scratch: x's 8-bit or fp16 copy and the sort's lists
// (expert_scratch_bytes).
void expert_mul_mat(const Tensor& dst, const OpCtx& c);
// gate and up (mul_mat_id nodes a and b, either order, same x and ids) and
// the GLU that alone reads them in one launch, the GLU's result written
// only as 8-bit blocks into c.glu_q8 (the GLU's 8-bit blocks) for the down
// product (OpCtx::x_from GluQ8).
void op_expert_glu(const Tensor& a, const Tensor& b, const Tensor& glu, const OpCtx& c);
// down and the moe_sum that alone reads it (decode: up to 64 pairs) in one
// launch: a block takes rows of one token through all its experts and sums
// them weighted, in slot order; down's own result is not written.
void op_expert_down_sum(const Tensor& down, const Tensor& sum, const OpCtx& c);

}  // namespace weir::cuda
