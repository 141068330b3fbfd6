// Reference (scalar) dequantizers, one per block format. They take a byte
// pointer with no alignment requirement and a count of whole blocks, and
// write block_size * n_blocks floats.
//
// These are the ground truth the SIMD kernels are compared against: each
// one reproduces, bit for bit, the float32 results of the `gguf` Python
// package's numpy dequantizer (tests/data/make_dequant_vectors.py). They
// compute in float32 in numpy's order; for these formats every product is
// exact, so the only rounding is the final "+ m" / "- min" (see the notes
// at the top of dequantize_legacy.cpp and dequantize_k.cpp), and kernels
// that reorder products or use FMA still match bit for bit. Use
// weir::dequantize_row() from core/dtype.h for dispatch by DType.
#pragma once
#include <cstdint>

namespace weir::quant {

void dequantize_f32(const void* src, float* dst, int64_t n);
void dequantize_f16(const void* src, float* dst, int64_t n);
void dequantize_bf16(const void* src, float* dst, int64_t n);

void dequantize_q4_0(const void* src, float* dst, int64_t n_blocks);
void dequantize_q4_1(const void* src, float* dst, int64_t n_blocks);
void dequantize_q5_0(const void* src, float* dst, int64_t n_blocks);
void dequantize_q5_1(const void* src, float* dst, int64_t n_blocks);
void dequantize_q8_0(const void* src, float* dst, int64_t n_blocks);

void dequantize_q2_K(const void* src, float* dst, int64_t n_blocks);
void dequantize_q3_K(const void* src, float* dst, int64_t n_blocks);
void dequantize_q4_K(const void* src, float* dst, int64_t n_blocks);
void dequantize_q5_K(const void* src, float* dst, int64_t n_blocks);
void dequantize_q6_K(const void* src, float* dst, int64_t n_blocks);
void dequantize_q8_K(const void* src, float* dst, int64_t n_blocks);

// Lookup formats (dequantize_lookup.cpp).
void dequantize_iq4_nl(const void* src, float* dst, int64_t n_blocks);
void dequantize_iq4_xs(const void* src, float* dst, int64_t n_blocks);
void dequantize_mxfp4(const void* src, float* dst, int64_t n_blocks);

}  // namespace weir::quant
