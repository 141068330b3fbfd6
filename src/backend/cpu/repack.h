// Weights in the CPU backend's own layouts, made at load: rows interleaved in
// groups of 8, so that one activation load and one scale conversion serve 8
// rows, and a block's integer sum lands in one lane per row (no horizontal
// sums). The file on disk is never changed; nothing above the CPU backend
// sees this layout.
//
// Q4_0 x 8 ("q4_0x8"): for each 32-element block of K, one record of
//   d[8]       the 8 rows' fp16 scales                         16 bytes
//   qs[4][32]  chunk j holds, row after row, bytes 4j..4j+3 of
//              each row's 16 nibble bytes                      128 bytes
// (144 bytes; 8 rows of the file's 18-byte blocks). A chunk's low nibbles
// are elements 4j..4j+3 of the 8 rows, its high nibbles elements 16+4j..
// 16+4j+3: one vpdpbusd each against 4 activation bytes broadcast.
//
// Products with activations in Q8_0 blocks (act_quant.h), per row and token:
//   acc = 0; for each block b:
//     isum = sum_i q_i * a_i - 8 * sum_i a_i      (q_i the nibble 0..15; exact)
//     acc  = fma(float(isum), d_w * d_a, acc)     (d_w * d_a rounded to float)
// The reference (repacked_tile_reference) computes exactly this, and every
// SIMD kernel equals it bit for bit. (The order differs from the file-layout
// kernels', qdot.h, whose 8 lanes a block are summed at the end: results
// differ from theirs in the last bits.) The same holds for every layout.
//
// Q5_0 x 8 ("q5_0x8"): for each 32-element block, one record of
//   d[8]       the 8 rows' fp16 scales                         16 bytes
//   qh[8][4]   row r's 32 fifth bits regrouped: bit v of its
//              byte k is that of the element in byte k of
//              nibble vector v (below)                         32 bytes
//   qs[4][32]  as q4_0x8's                                    128 bytes
// (176 bytes, as 8 file rows' blocks). Nibble vector v < 4 is chunk v's
// low nibbles (elements 4v..4v+3 of each row), v >= 4 chunk v - 4's high
// nibbles (16 + 4(v - 4)..): one 32-byte qh load gives every vector its
// fifth bits (bit v shifted to bit 4). Products as q4_0x8's with q in
// 0..31 and -16 * sum_i a_i.
//
// Q4_K x 8 ("q4_Kx8"): for each 256-element super-block, one record of
//   d[8], dmin[8]       the 8 rows' fp16 scales                 32 bytes
//   sc[8][8], mn[8][8]  sub-block s's 6-bit scale and min of
//                       row r at [s][r], unpacked to bytes     128 bytes
//   qs[4][8][32]        pair p (sub-blocks 2p, 2p+1), chunk c:
//                       row after row, bytes 32p+4c..32p+4c+3
//                       of each row's 128 nibble bytes        1024 bytes
// (1184 bytes; 8 file rows' blocks are 1152). Low nibbles of chunk (p, c)
// are elements 4c..4c+3 of sub-block 2p, high nibbles those of 2p+1.
// Products with Q8_K activations (bsums: their 16-element sums), per row,
// token and super-block, the integer sums exact:
//   isum = sum_s sc[s] * (sum_i q_i * a_i over sub-block s)
//   msum = sum_s mn[s] * (bsums[2s] + bsums[2s + 1])
//   acc  = fma(float(isum), d_w * d_a, acc)
//   acc  = fma(float(msum), dmin_w * -d_a, acc)
//
// Q5_K x 8 ("q5_Kx8"): for each 256-element super-block, one record of
//   d, dmin, sc, mn, qs as q4_Kx8's                          1184 bytes
//   qh[8][32]           chunk c: row after row, bytes 4c..4c+3
//                       of each row's 32 qh bytes              256 bytes
// (1440 bytes; 8 file rows' blocks are 1408). Element 4c + k of sub-block
// s of a row is its nibble (as in q4_Kx8) with bit s of byte k of its qh
// chunk c above it: one 32-byte qh load serves a chunk of all 8
// sub-blocks. Products with Q8_K activations as q4_Kx8's, q in 0..31.
//
// Q6_K x 8 ("q6_Kx8"): for each 256-element super-block, one record of
//   d[8]                the 8 rows' fp16 scales                 16 bytes
//   sc[16][8]           sub-block s's signed scale of row r
//                       at [s][r]                              128 bytes
//   ql[2][2][8][32]     half h, pair u, chunk c: row after row,
//                       bytes 64h+32u+4c..+3 of each row's ql 1024 bytes
//   qh[2][8][32]        half h, chunk c: row after row, bytes
//                       32h+4c..+3 of each row's qh            512 bytes
// (1680 bytes, as 8 file rows' blocks). Element 128h + 32s + 4c + k of a
// row is its quant q (0..63): the low (s < 2) or high (s >= 2) nibble of
// byte k of ql chunk (h, s % 2, c), and bits 2s, 2s+1 of byte k of qh
// chunk (h, c) above it. Products with Q8_K activations, per row, token
// and super-block, over the 16 sub-blocks of 16 elements (the offset -32
// of the quants through the bsums; exact):
//   isum = sum_s sc[s] * (sum_i q_i * a_i over sub-block s - 32 * bsums[s])
//   acc  = fma(float(isum), d_w * d_a, acc)
//
// Q8_0 x 8 ("q8_0x8"): for each 32-element block, one record of
//   d[8]       the 8 rows' fp16 scales                         16 bytes
//   qs[8][32]  chunk c holds, row after row, quants 4c..4c+3
//              of each row                                    256 bytes
// (272 bytes, as 8 file rows' blocks). Products with Q8_0 activations, per
// row and token: acc = fma(float(sum_i q_i * a_i), d_w * d_a, acc) a block.
// The activations' quants must lie in -127..127 (quantize_act's do): the
// AVX2 kernel multiplies |w| by a with w's sign.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "backend/cpu/qdot.h"
#include "core/dtype.h"

namespace weir::cpu {

constexpr int kRepackRows = 8;

// Whether weights of type t with rows of K elements have a repacked layout.
bool can_repack(DType t, int64_t K);
// Bytes of one group of kRepackRows rows of K elements in the layout.
size_t repacked_group_bytes(DType t, int64_t K);
// Rewrites rows [8g, 8g + 8) of w's N rows (wstride bytes apart) for g in
// [g0, g1) into out (group g at out + (g - g0) * repacked_group_bytes); rows
// past N are zeros (scale 0: their products are 0 and never read).
void repack_groups(DType t, const uint8_t* w, size_t wstride, int64_t K, int64_t N, int64_t g0, int64_t g1,
                   uint8_t* out);

// y[j * ldy + 8 g + r] = dot(row 8g + r, activation row j) for groups
// g < n_groups (each group_bytes apart from `groups`), rows r < 8, and
// activation rows j < nr (1..kTileMax, astride bytes apart, blocks of
// activation_type(t), act_quant.h).
using RepackedTileFn = void (*)(int64_t K, const uint8_t* groups, size_t group_bytes, int n_groups,
                                const void* a, size_t astride, int nr, float* y, size_t ldy);
// The kernel for t at a SIMD level (the best lower one that has it); null
// when t has no repacked layout.
RepackedTileFn repacked_tile(DType t, SimdLevel level = best_simd_level());
// A weight matrix in the layout: ceil(N / 8) groups, the last one padded
// with zero rows, so that every row is computed the same way whatever
// range of rows a thread or a tensor-parallel rank takes.
struct RepackedWeight {
  DType type = DType::F32;
  int64_t K = 0, N = 0, groups = 0;
  size_t group_bytes = 0;
  uint8_t* data = nullptr;
  std::shared_ptr<void> keep;  // owns data
};

// The plain version, the reference.
void repacked_tile_reference(DType t, int64_t K, const uint8_t* groups, size_t group_bytes, int n_groups,
                             const void* a, size_t astride, int nr, float* y, size_t ldy);

}  // namespace weir::cpu
