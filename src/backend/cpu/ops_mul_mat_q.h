// mul_mat on quantized activations (ops_mul_mat_q.cpp); op_mul_mat calls it
// when x is Q8_0 / Q8_K (the backend quantized it, see cpu_backend.cpp).
#pragma once
#include <cstdint>

#include "backend/cpu/cpu_ops.h"

namespace weir::cpu {

// Whether t is an activation type of the integer kernels (qdot.h).
bool is_quantized_activation(DType t);

// Outputs [n0, n1) of every token: y[t][n] = dot(W row n, x row t), x
// quantized to activation_type(W). Throws weir::Error on bad operands.
void mul_mat_q_rows(const Tensor& dst, int64_t n0, int64_t n1, Scratch* s);

}  // namespace weir::cpu
