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

struct RepackedWeight;
// The same for a weight the backend repacked (repack.h; dst.src[0] the file's
// weight, whose rows past rw's groups are read where they are): rows
// [n0, n1), n0 a multiple of 8.
void mul_mat_repacked_rows(const Tensor& dst, const RepackedWeight& rw, int64_t n0, int64_t n1);

}  // namespace weir::cpu
