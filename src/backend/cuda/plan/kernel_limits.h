// The limits the CUDA kernels are built with that the host rules
// (plan/*_rules.cpp) also ask: each has its one definition here, read by
// the kernels (.cu, .cuh) and by the rules. Plain C++: no CUDA header.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace weir::cuda {

// ---- Decode products (ops_mul_mat.cu, ops_mul_mat_q8.cu) ----
// Products on the same x that one launch takes (q, k and v; gate and up):
// product_group.cuh's Mats, the tile kernels' TileMats.
inline constexpr int kMaxMats = 3;
// The most tokens the float decode kernel takes (more: the tile kernels or
// cuBLAS).
inline constexpr int kMaxVecTokens = 8;
// The most tokens the 8-bit decode products take.
inline constexpr int64_t kMaxQ8Tokens = 8;
// Weight rows a decode warp takes: 2 (sharing the x loads) while the
// accumulators stay few (up to kMaxTwoRowTokens tokens), else 1. Both decode
// kernels, the float one and the 8-bit ones. The launches that do more than
// store their rows (a deferred norm's writer and readers, a GLU, row jobs)
// need the two-row warp, so they take at most kMaxTwoRowTokens tokens.
inline constexpr int64_t kMaxTwoRowTokens = 4;
constexpr int rows_per_warp(int tokens) { return tokens <= kMaxTwoRowTokens ? 2 : 1; }
// The types whose float decode launches take deferred norms and row jobs
// (the float models'; the others keep their instantiations few).
constexpr bool has_vec_ends(DType t) { return t == DType::F16 || t == DType::BF16 || t == DType::F32; }
// Largest fp16 copy of W made at once for cuBLAS (bytes).
inline constexpr size_t kSliceBytes = size_t(256) << 20;

// ---- 8-bit activations (q8_act.cuh) ----
// A q8_0 block (the 8-bit KV cache's, GGUF's layout): a half scale, then
// 32 int8 quants.
inline constexpr int kQ8Bytes = 34;
// The quants of T rows of K elements ([T][K] int8), 256-byte rounded; the
// (d, d * sum) pairs (a half2 each) follow them.
inline size_t q8_quant_bytes(int64_t K, int64_t T) { return (size_t(K) * size_t(T) + 255) / 256 * 256; }
inline constexpr size_t kQ8PairBytes = 4;  // a block's (d, d * sum): one __half2

// ---- Weight types the kernels are built for ----
// The types dispatch_dtype (dequant.cuh) instantiates the kernels for: those
// with a device dequantizer (Q<T>).
constexpr bool has_dequantizer(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_NL:
    case DType::IQ4_XS:
    case DType::MXFP4: return true;
    default: return false;
  }
}
// The alignment (bytes) the 8-bit decode and expert products need of a
// weight type's rows (q8_dot.cuh's loads): q4_K / q5_K are read as 16-byte
// words, iq4_xs (136-byte blocks) as 8-byte ones, mxfp4 (17-byte blocks) a
// byte at a time or as words joined by funnel shifts, the others as 2-byte
// aligned words.
constexpr size_t q8_row_alignment(DType t) {
  return t == DType::Q4_K || t == DType::Q5_K ? 16 : t == DType::IQ4_XS ? 8 : t == DType::MXFP4 ? 1 : 2;
}
// The types of the MMA tile kernel (mma_frag.cuh: MmaW<T>::kHas), and
// those of them whose rows it reads as 16-byte words (MmaW<T>::kAligned).
constexpr bool has_mma_tile(DType t) {
  return t == DType::Q4_0 || t == DType::Q8_0 || t == DType::Q4_K || t == DType::Q6_K || t == DType::IQ4_NL ||
         t == DType::IQ4_XS || t == DType::MXFP4;
}
constexpr bool mma_tile_needs_16_byte_rows(DType t) { return t == DType::Q4_K; }
// The MMA tile kernel's x rows (fp16, permuted): K rounded up to a step of
// 256, zeros past K.
constexpr int64_t mma_x_ld(int64_t K) { return (K + 255) / 256 * 256; }
// Types whose rows may end inside a step (K a multiple of 32 only): blocks
// of 32 and 256-element steps, whose last step the kernel cuts at K (the
// experts' products; gpt-oss's K is 2880).
constexpr bool mma_tail_ok(DType t) { return t == DType::IQ4_NL || t == DType::MXFP4; }

// ---- The WMMA tile kernel (ops_mul_mat_tile.cu) ----
inline constexpr int kTileStepK = 256;  // K a step (the kernel's BK)
// Splits of K: at most this many, each of this many steps at least, their
// partial sums in scratch up to this many bytes.
inline constexpr int kTileMaxSplits = 16, kTileMinSplitSteps = 1;
inline constexpr size_t kTileMaxPartialBytes = size_t(32) << 20;

// ---- Ropes and KV-cache writes (ops_rope.cu) ----
inline constexpr int kMaxJobs = 4;  // jobs a rope/store launch takes

// ---- Mixture of experts (ops_moe.cu, ops_moe_q8.cu) ----
inline constexpr int kRouteValues = 8;  // route_kernel: values a lane, so E <= 32 * 8 experts
// Up to this many (slot, token) pairs (decode): a block a pair; more: the
// pairs sorted into tiles of one expert.
inline constexpr int64_t kExpertDirectPairs = 64;
inline constexpr int kExpertGluTile = 4;      // pairs of a tile: the GLU's (4 rows a warp)
inline constexpr int kExpertProductTile = 8;  // a product's (2 rows a warp)
inline constexpr int kExpertMaxSlots = 32;    // expert_down_sum_kernel: experts a token

}  // namespace weir::cuda
