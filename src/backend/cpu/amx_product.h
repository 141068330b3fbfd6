// Prefill products on AMX tiles (amx.h says whether this CPU has them): the
// weights, whatever their type, dequantized 32 rows at a time into a bf16
// panel, the activations in bf16, and TDPBF16PS (16 x 32 bf16 times
// 32 x 16 bf16 into 16 x 16 fp32, 8,192 multiply-adds an instruction)
// accumulating in float over the whole row. bf16 rather than AMX-INT8: the
// block formats scale every 16 or 32 elements of a row, which an int8 tile
// product (that sums 64 elements at once) cannot follow, and a weight panel
// made once serves every token of the batch.
//
// Layouts (internal to the CPU backend):
//   weight panel: 32 rows of a block of K in bf16, as the A tiles they make,
//     each 1 KiB and contiguous (16 rows of 32 elements): element (n, k) at
//       ((k / 32) * 2 + n / 16) * 512 + (n % 16) * 32 + k % 32
//     (rows past the weight's last are zeros). Contiguous tiles stream from
//     the cache line after line; rows of a block apart (4 or 8 KiB) would
//     put a tile's 16 lines in one L1 set.
//   activations ("packed"): tokens in tiles of 16, the tile's 32-element
//     steps of K one after the other, each 1 KiB: 16 lines of 16 (token)
//     pairs of bf16, line kk holding elements 2kk, 2kk+1 of the step, as
//     the B operand wants them. Element (t, k) lives at
//       ((t / 16) * (K / 32) + k / 32) * 512 + ((k % 32) / 2) * 32 + (t % 16) * 2 + k % 2
//     (in bf16 units); the token count is padded to a multiple of 32.
// The result C (weight rows x tokens) is stored transposed into y.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cpu/amx.h"  // amx_prefetch_steps
#include "core/dtype.h"

namespace weir::cpu {

constexpr int64_t kAmxMinTokens = 32;  // fewer tokens: the vector kernels
constexpr int64_t kAmxPanelRows = 32;  // weight rows a panel (two A tiles)
constexpr int64_t kAmxTokenPad = 32;   // tokens a step of the tile loop (two B tiles)

// Whether weights of type t with rows of K elements can take the path.
bool amx_product_fits(DType t, int64_t K);
// Bytes of the packed activations of T tokens of K elements.
size_t amx_packed_bytes(int64_t T, int64_t K);
// Writes token t's K activations into the packed layout at base.
void amx_pack_token(const float* x, int64_t K, int64_t t, uint16_t* base);

// Where element (n, k) of a panel lies (bf16 units).
inline int64_t amx_panel_index(int64_t n, int64_t k) { return ((k / 32) * 2 + n / 16) * 512 + (n % 16) * 32 + k % 32; }

// Builds the panel of weight rows [0, rows) (rows <= 32) of type t, wstride
// bytes apart, elements [k0, k0 + kb) of each (k0 and kb multiples of the
// type's block and of 32): panel holds 32 * kb bf16.
void amx_build_panel(DType t, const uint8_t* w, size_t wstride, int64_t rows, int64_t k0, int64_t kb,
                     uint16_t* panel);

// Accumulators of one panel: per 32 tokens, four 16 x 16 fp32 tiles (weight
// rows 16 (q / 2) + n by tokens 16 (q % 2) + j at q * 256 + n * 16 + j), so
// 32 floats a padded token.
size_t amx_accumulator_floats(int64_t T);

// For each of np panels (kb elements a row), adds to its accumulators c[p]
// (zeroed first when zero) the products with the packed activations' steps
// [s0, s0 + kb / 32) of K / 32 = steps: token blocks outside, panels inside,
// so a block's activations serve every panel from the cache. The tile
// kernel (AMX; the caller checks amx_support()) and the plain version (the
// reference for tests; float sums in another order).
void amx_accumulate(const uint16_t* const* panels, int np, int64_t kb, const uint16_t* packed, int64_t steps, int64_t s0,
                    int64_t T, float* const* c, bool zero);
void amx_accumulate_reference(const uint16_t* const* panels, int np, int64_t kb, const uint16_t* packed, int64_t steps,
                              int64_t s0, int64_t T, float* const* c, bool zero);
// y[t * ldy + n] = the accumulators' value for tokens t < T, rows n < rows.
void amx_store_result(const float* c, int64_t T, int64_t rows, float* y, size_t ldy);

// Rows [n0, n1) of y = W x^T (n0 a multiple of 32): up to 4 panels (128
// rows) at a time, K in blocks of at most k_block elements (each panel
// group's block stays in L2 while every token block passes), accumulators
// kept between blocks. w: the weight's N rows, wstride bytes apart. tiles:
// the AMX kernel, else the plain one (tests).
constexpr int64_t kAmxKBlock = 2048;
void amx_product_rows(DType t, const uint8_t* w, size_t wstride, int64_t N, int64_t K, const uint16_t* packed,
                      int64_t T, float* y, size_t ldy, int64_t n0, int64_t n1, bool tiles = true,
                      int64_t k_block = kAmxKBlock);

}  // namespace weir::cpu
