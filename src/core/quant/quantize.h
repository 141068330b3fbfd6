// Reference quantizers: float rows -> GGUF block formats. Plain scalar code;
// the output is what the file holds, so it is defined by the format, and for
// the legacy types bit-exact with the `gguf` Python package's quantizers.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace weir::quant {

// Whether quantize_rows can produce type t.
bool can_quantize(DType t);

// Quantizes n_rows rows of n_per_row floats (a multiple of t's block size)
// into dst, rows packed back to back (row_bytes(t, n_per_row) bytes each).
// Throws weir::Error naming the type when it cannot be produced.
void quantize_rows(DType t, const float* src, void* dst, int64_t n_rows, int64_t n_per_row);

}  // namespace weir::quant
