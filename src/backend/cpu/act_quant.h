// Activation rounding as llama.cpp's CPU backend does it. Its quantized
// matrix products quantize the activations to the weight type's "vec_dot"
// partner (Q8_0 for the 32-blocks, Q8_K for the K-quants, F16/BF16 for the
// half types) before an integer dot product,.
// weir's results follow llama.cpp token for token only when it rounds the
// same way; the rounding is also what the 8-bit SIMD kernels need anyway.
//
// round_activations() writes the values the quantized activations stand
// for (q * d), so a float dot product with the dequantized weights equals
// llama.cpp's integer dot product up to float summation order.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace weir::cpu {

// The type llama.cpp quantizes activations to for weights of type w.
DType activation_type(DType w);

// y = x rounded through activation_type(w); n is a multiple of its block size
// (x == y allowed). For F32 weights this is a copy.
void round_activations(DType w, const float* x, float* y, int64_t n);

// Reference roundings, one per activation type.
void round_q8_0(const float* x, float* y, int64_t n);
void round_q8_K(const float* x, float* y, int64_t n);
void round_f16(const float* x, float* y, int64_t n);
void round_bf16(const float* x, float* y, int64_t n);

}  // namespace weir::cpu
