// Reference quantizers: float rows -> GGUF block formats. Plain scalar code;
// the output is what the file holds, so it is defined by the format, and for
// the legacy types bit-exact with the `gguf` Python package's quantizers.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace weir::quant {

// Whether quantize_rows can produce type t.
bool can_quantize(DType t);

// Whether quantize_rows's importance weights change type t's result
// (llama.cpp's quant_weights, from an importance matrix): IQ4_NL, IQ4_XS,
// Q2_K ... Q6_K and Q4_0 ... Q5_1, each with llama.cpp's weighted rules
// (unweighted, the K-quants keep weir's own search). Q8_0 and MXFP4 have no
// use for them, there either.
bool uses_importance(DType t);

// Quantizes n_rows rows of n_per_row floats (a multiple of t's block size)
// into dst, rows packed back to back (row_bytes(t, n_per_row) bytes each).
// importance, when not null, holds n_per_row weights (one per column, as
// llama-quantize passes an importance matrix's in_sum2 / counts) for the
// types where uses_importance(t); the others ignore it.
// Throws weir::Error naming the type when it cannot be produced.
void quantize_rows(DType t, const float* src, void* dst, int64_t n_rows, int64_t n_per_row,
                   const float* importance = nullptr);

}  // namespace weir::quant
