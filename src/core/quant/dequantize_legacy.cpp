// Reference dequantization of the legacy 32-element formats q4_0, q4_1,
// q5_0, q5_1 and q8_0. Layouts are described in block_formats.h.
//
// Rounding: the expected values come from the gguf package's numpy code,
// which computes in float32, one operation at a time, in this order:
//   q4_0, q5_0, q8_0:  d * float(q)
//   q4_1, q5_1:        (d * float(q)) + m
// fp16 -> float32 and small int -> float32 conversions are exact, and so is
// every product here: d has an 11-bit significand and |q| <= 128 adds at
// most 7 more, well within float32's 24 bits (and far from its exponent
// limits, fp16 subnormal d included). The only rounding step is the final
// "+ m", so a fused multiply-add (SIMD kernels) gives the same bits.

#include "core/half.h"
#include "core/quant/block_formats.h"
#include "core/quant/dequantize.h"

namespace weir::quant {
namespace {

// The 4-bit value of element i (0..31) of a nibble-packed legacy block:
// low nibbles hold elements 0..15, high nibbles 16..31.
inline int nibble(const uint8_t* qs, int i) {
  return i < kQK / 2 ? (qs[i] & 0x0F) : (qs[i - kQK / 2] >> 4);
}

// Bit 4 of element i of a q5 block: bit i of qh as a little-endian uint32.
inline int high_bit(const uint8_t* qh, int i) { return (qh[i / 8] >> (i % 8)) & 1; }

}  // namespace

void dequantize_q4_0(const void* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const auto blk = load_block<BlockQ4_0>(src, b);
    const float d = fp16_to_f32(blk.d);
    for (int i = 0; i < kQK; ++i) {
      const int q = nibble(blk.qs, i) - 8;
      dst[b * kQK + i] = d * float(q);
    }
  }
}

void dequantize_q4_1(const void* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const auto blk = load_block<BlockQ4_1>(src, b);
    const float d = fp16_to_f32(blk.d);
    const float m = fp16_to_f32(blk.m);
    for (int i = 0; i < kQK; ++i) {
      const int q = nibble(blk.qs, i);
      const float dq = d * float(q);
      dst[b * kQK + i] = dq + m;
    }
  }
}

void dequantize_q5_0(const void* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const auto blk = load_block<BlockQ5_0>(src, b);
    const float d = fp16_to_f32(blk.d);
    for (int i = 0; i < kQK; ++i) {
      const int q = (nibble(blk.qs, i) | (high_bit(blk.qh, i) << 4)) - 16;
      dst[b * kQK + i] = d * float(q);
    }
  }
}

void dequantize_q5_1(const void* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const auto blk = load_block<BlockQ5_1>(src, b);
    const float d = fp16_to_f32(blk.d);
    const float m = fp16_to_f32(blk.m);
    for (int i = 0; i < kQK; ++i) {
      const int q = nibble(blk.qs, i) | (high_bit(blk.qh, i) << 4);
      const float dq = d * float(q);
      dst[b * kQK + i] = dq + m;
    }
  }
}

void dequantize_q8_0(const void* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const auto blk = load_block<BlockQ8_0>(src, b);
    const float d = fp16_to_f32(blk.d);
    for (int i = 0; i < kQK; ++i) dst[b * kQK + i] = d * float(blk.qs[i]);
  }
}

}  // namespace weir::quant
