// Internal to the CUDA backend: the mixture-of-experts launchers
// (ops_moe.cu; the ops' semantics: core/graph.h). mul_mat_id reads only the
// chosen experts' rows, the experts read from ids on the device; x in F32.
#pragma once
#include "backend/cuda/cuda_ops.h"

namespace weir::cuda {

void op_top_k(const Tensor& dst, const OpCtx& c);
void op_moe_weights(const Tensor& dst, const OpCtx& c);
void op_mul_mat_id(const Tensor& dst, const OpCtx& c);
void op_moe_sum(const Tensor& dst, const OpCtx& c);
// Whether op_mul_mat_id has a kernel for t's weights.
bool mul_mat_id_supported(const Tensor& t);

}  // namespace weir::cuda
