// Integer dot products of quantized weight rows with activations quantized
// to the weight type's partner (act_quant.h: Q8_0 for the 32-element block
// types, Q8_K for the K-quants), as llama.cpp's CPU backend computes them.
//
// Each weight type has a plain reference kernel and SIMD kernels (AVX2,
// AVX-512, AVX-512 VNNI) picked at run time from the CPU's features; tests
// compare every SIMD kernel with its reference twin on random rows.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace weir::cpu {

// dot(weight row, activation row) over n elements (a multiple of the weight
// block size): w holds n elements of the weight type, a the same n elements
// of activation_type(weight type) blocks.
using VecDotFn = float (*)(int64_t n, const void* w, const void* a);

enum class SimdLevel { Reference, AVX2, AVX512, AVX512_VNNI };
SimdLevel best_simd_level();  // of this CPU (cached)
const char* simd_level_name(SimdLevel l);

// The kernel for weight type w at a SIMD level (falling back to the best
// lower level that has one); nullptr when w has no integer path.
VecDotFn vec_dot_fn(DType w, SimdLevel level = best_simd_level());

// Quantizes n activations (a multiple of the block size) to Q8_0 or Q8_K
// blocks; values equal round_q8_0 / round_q8_K's (act_quant.h) bit for bit.
void quantize_act(DType act_type, const float* x, void* out, int64_t n,
                  SimdLevel level = best_simd_level());

}  // namespace weir::cpu
