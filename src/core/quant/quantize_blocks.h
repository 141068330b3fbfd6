// The per-format reference quantizers behind weir::quant::quantize_rows
// (quantize.cpp dispatches). Each takes n_blocks * block_size floats and
// writes n_blocks blocks to a byte pointer with no alignment requirement.
// All are pure functions of their input (no state, no allocation shared
// between calls), so callers may run them on disjoint rows in parallel.
#pragma once
#include <cstdint>

namespace weir::quant {

// Legacy formats (quantize_legacy.cpp): bit-exact with the gguf package.
void quantize_q4_0(const float* x, void* dst, int64_t n_blocks);
void quantize_q4_1(const float* x, void* dst, int64_t n_blocks);
void quantize_q5_0(const float* x, void* dst, int64_t n_blocks);
void quantize_q5_1(const float* x, void* dst, int64_t n_blocks);
void quantize_q8_0(const float* x, void* dst, int64_t n_blocks);

// K-quants (quantize_k.cpp): least-squares searches, see k_fit.h.
void quantize_q2_K(const float* x, void* dst, int64_t n_blocks);
void quantize_q3_K(const float* x, void* dst, int64_t n_blocks);
void quantize_q4_K(const float* x, void* dst, int64_t n_blocks);
void quantize_q5_K(const float* x, void* dst, int64_t n_blocks);
void quantize_q6_K(const float* x, void* dst, int64_t n_blocks);
void quantize_q8_K(const float* x, void* dst, int64_t n_blocks);
// With importance weights (quantize_weighted.cpp): llama.cpp's rules. qw
// holds the weights of a row of qw_period (= n_per_row) elements; the
// legacy ones need whole rows (their weights use the row's mean square).
void quantize_q2_K_weighted(const float* x, void* dst, int64_t n_blocks, const float* qw, int64_t qw_period);
void quantize_q3_K_weighted(const float* x, void* dst, int64_t n_blocks, const float* qw, int64_t qw_period);
void quantize_q4_K_weighted(const float* x, void* dst, int64_t n_blocks, const float* qw, int64_t qw_period);
void quantize_q5_K_weighted(const float* x, void* dst, int64_t n_blocks, const float* qw, int64_t qw_period);
void quantize_q6_K_weighted(const float* x, void* dst, int64_t n_blocks, const float* qw, int64_t qw_period);
void quantize_q4_0_weighted(const float* x, void* dst, int64_t n_blocks, const float* qw, int64_t n_per_row);
void quantize_q4_1_weighted(const float* x, void* dst, int64_t n_blocks, const float* qw, int64_t n_per_row);
void quantize_q5_0_weighted(const float* x, void* dst, int64_t n_blocks, const float* qw, int64_t n_per_row);
void quantize_q5_1_weighted(const float* x, void* dst, int64_t n_blocks, const float* qw, int64_t n_per_row);

// Lookup formats (quantize_lookup.cpp): llama.cpp's rules. qw, when not
// null, holds importance weights for a row of qw_period elements (block b
// reads qw[(block_size * b) % qw_period ...]).
void quantize_iq4_nl(const float* x, void* dst, int64_t n_blocks, const float* qw, int64_t qw_period);
void quantize_iq4_xs(const float* x, void* dst, int64_t n_blocks, const float* qw, int64_t qw_period);
void quantize_mxfp4(const float* x, void* dst, int64_t n_blocks);

}  // namespace weir::quant
