// Integer dot products of quantized weight rows with activations quantized
// to the weight type's partner (act_quant.h: Q8_0 for the 32-element block
// types, Q8_K for the K-quants), as llama.cpp's CPU backend computes them.
//
// Each weight type has a plain reference kernel and SIMD kernels (AVX2,
// AVX-512, AVX-512 VNNI) picked at run time from the CPU's features; tests
// compare every SIMD kernel with its reference twin on random rows.
//
// Float summation order: the per-block integer sums are exact; the blocks'
// float contributions are accumulated the way llama.cpp's AVX2 kernels do
// (8 float lanes, one fused multiply-add per block, horizontal sum at the
// end) on every SIMD level, so greedy outputs follow the reference data.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace weir::cpu {

// dot(weight row, activation row) over n elements (a multiple of the weight
// block size): w holds n elements of the weight type, a the same n elements
// of activation_type(weight type) blocks.
using VecDotFn = float (*)(int64_t n, const void* w, const void* a);

// A tile of dot products for matrix-matrix products (prefill, batches):
// y[j * ldy + i] = dot(w row i, a row j) for i < mr (any mr >= 1) and
// j < nr (1..kTileMax); weight rows are wstride bytes apart, activation rows
// astride. The kernel runs every weight row past all nr activation rows, so
// each weight block is unpacked once per nr dots; one call covers a whole
// row range, with no per-tile call in the caller's loops.
using DotTileFn = void (*)(int64_t n, const void* w, size_t wstride, int mr, const void* a,
                           size_t astride, int nr, float* y, size_t ldy);
constexpr int kTileMax = 8;

struct QDotKernels {
  VecDotFn dot = nullptr;
  DotTileFn tile = nullptr;
  explicit operator bool() const { return dot != nullptr; }
};

enum class SimdLevel { Reference, AVX2, AVX512, AVX512_VNNI };
// Of this CPU: AVX2 needs AVX2+FMA+F16C+BMI2, AVX512 needs F+BW+DQ+VL on
// top, AVX512_VNNI adds VNNI; capped by set_simd_cap (tools set it from
// WEIR_SIMD=reference|avx2|avx512, for tests and comparisons).
SimdLevel best_simd_level();
void set_simd_cap(SimdLevel cap);  // process-wide; set once, at start-up
// The same without the cap: the highest level that may be asked for;
// kernel lookups and quantize_act clamp requests to it.
SimdLevel hardware_simd_level();
const char* simd_level_name(SimdLevel l);

// How far ahead the K-quant decode kernels prefetch a weight row, and into
// which cache (0: L1, 1: L2, 2: L3, 3: non-temporal); bytes 0: no prefetch.
// Process-wide, set once at start-up (tools set it from WEIR_PREFETCH=
// BYTES[,l1|l2|l3|nta] to measure other distances on a given machine).
struct PrefetchPlan {
  size_t bytes = 2048;
  int level = 0;
};
void set_prefetch(PrefetchPlan p);
PrefetchPlan prefetch_plan();
// The repacked kernels' (repack.h) decode prefetch: set_prefetch's plan
// once it has been called, else their own default, 8192 bytes into L2 (dev
// VM, Zen 4, 8B Q4_K_M decode: 21.6 GB/s without, ~22-23 at 1-4 KiB into
// L1, 29 at 4-8 KiB into L2).
PrefetchPlan repack_prefetch_plan();

// The kernels for weight type w at a SIMD level (falling back to the best
// lower level that has one); empty when w has no integer path.
QDotKernels qdot_kernels(DType w, SimdLevel level = best_simd_level());

// Bytes of one row of n activations quantized for weights of type w.
size_t act_row_bytes(DType w, int64_t n);

// Quantizes n activations (a multiple of the block size) to Q8_0 or Q8_K
// blocks; values equal round_q8_0 / round_q8_K's (act_quant.h) bit for bit.
void quantize_act(DType act_type, const float* x, void* out, int64_t n,
                  SimdLevel level = best_simd_level());

}  // namespace weir::cpu
