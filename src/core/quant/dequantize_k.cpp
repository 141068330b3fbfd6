// Reference dequantization of the K-quant super-block formats q2_K, q3_K,
// q4_K, q5_K, q6_K and q8_K (256 elements each). Layouts and the packing of
// the sub-block scales are described in block_formats.h.
//
// Rounding: the expected values come from the gguf package's numpy code
// (ggml's dequantize_row_*_K compute the same way), all in float32, one
// operation at a time. The sub-block factors are formed first, once per
// sub-block, and then applied to the quant:
//   q2_K:        dl = d * float(sc & 15);  ml = dmin * float(sc >> 4);
//                x  = (dl * float(q)) - ml
//   q3_K, q6_K:  dl = d * float(sc);       x = dl * float(q)
//   q4_K, q5_K:  dl = d * float(sc);       ml = dmin * float(mn);
//                x  = (dl * float(q)) - ml
//   q8_K:        x  = d * float(q)          (d is already float32)
// We keep that order, but for every format except q8_K all the products are
// exact in float32: d / dmin are fp16 (significands of at most 11 bits,
// exponents in [-24, 15]), the scale adds at most 7 significant bits
// (6-bit scales, q6_K's int8 scales: |sc| <= 128) and the quant at most 5
// (|q| <= 32), so at most 23 of float32's 24 bits, with no overflow or
// underflow. So d * (sc * q) equals (d * sc) * q, and the only rounding is
// the final "- ml", which an FMA performs identically: SIMD kernels may
// reorder the products and fuse the subtraction and still match bit for
// bit. q8_K (float32 d) is a single rounded product.

#include "core/half.h"
#include "core/quant/block_formats.h"
#include "core/quant/dequantize.h"

namespace weir::quant {

void dequantize_q2_K(const void* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const auto blk = load_block<BlockQ2_K>(src, b);
    const float d = fp16_to_f32(blk.d);
    const float dmin = fp16_to_f32(blk.dmin);
    float* y = dst + b * kQK_K;
    // Element i = 128*h + 32*s + l takes bits 2s..2s+1 of qs[32*h + l];
    // its sub-block (16 elements) is i / 16.
    for (int i = 0; i < kQK_K; ++i) {
      const int h = i / 128, s = (i / 32) % 4, l = i % 32;
      const int q = (blk.qs[32 * h + l] >> (2 * s)) & 3;
      const uint8_t sc = blk.scales[i / 16];
      const float dl = d * float(sc & 0x0F);
      const float ml = dmin * float(sc >> 4);
      const float dq = dl * float(q);
      y[i] = dq - ml;
    }
  }
}

void dequantize_q3_K(const void* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const auto blk = load_block<BlockQ3_K>(src, b);
    const float d = fp16_to_f32(blk.d);
    int8_t sc[16];
    unpack_scales_q3_K(blk.scales, sc);
    float* y = dst + b * kQK_K;
    // Element i = 128*h + 32*s + l: low 2 bits from qs[32*h + l] at bit 2s,
    // high bit from hmask[l] at bit i / 32. A clear high bit means q - 4.
    for (int i = 0; i < kQK_K; ++i) {
      const int h = i / 128, s = (i / 32) % 4, l = i % 32;
      const int lo = (blk.qs[32 * h + l] >> (2 * s)) & 3;
      const int hbit = (blk.hmask[l] >> (i / 32)) & 1;
      const int q = lo - (hbit ? 0 : 4);
      const float dl = d * float(sc[i / 16]);
      y[i] = dl * float(q);
    }
  }
}

void dequantize_q4_K(const void* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const auto blk = load_block<BlockQ4_K>(src, b);
    const float d = fp16_to_f32(blk.d);
    const float dmin = fp16_to_f32(blk.dmin);
    float* y = dst + b * kQK_K;
    // Sub-block j (32 elements) = nibble k = j % 2 of qs[32*(j/2) .. +31].
    for (int j = 0; j < kQK_K / 32; ++j) {
      uint8_t sc, mn;
      unpack_scale_min_k4(j, blk.scales, &sc, &mn);
      const float dl = d * float(sc);
      const float ml = dmin * float(mn);
      const uint8_t* qs = blk.qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      for (int l = 0; l < 32; ++l) {
        const int q = (qs[l] >> shift) & 0x0F;
        const float dq = dl * float(q);
        y[32 * j + l] = dq - ml;
      }
    }
  }
}

void dequantize_q5_K(const void* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const auto blk = load_block<BlockQ5_K>(src, b);
    const float d = fp16_to_f32(blk.d);
    const float dmin = fp16_to_f32(blk.dmin);
    float* y = dst + b * kQK_K;
    // Low 4 bits as in q4_K; bit 4 of sub-block j's element l is bit j of
    // qh[l].
    for (int j = 0; j < kQK_K / 32; ++j) {
      uint8_t sc, mn;
      unpack_scale_min_k4(j, blk.scales, &sc, &mn);
      const float dl = d * float(sc);
      const float ml = dmin * float(mn);
      const uint8_t* qs = blk.qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      for (int l = 0; l < 32; ++l) {
        const int q = ((qs[l] >> shift) & 0x0F) | (((blk.qh[l] >> j) & 1) << 4);
        const float dq = dl * float(q);
        y[32 * j + l] = dq - ml;
      }
    }
  }
}

void dequantize_q6_K(const void* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const auto blk = load_block<BlockQ6_K>(src, b);
    const float d = fp16_to_f32(blk.d);
    float* y = dst + b * kQK_K;
    // Element i = 128*h + 32*s + l: low 4 bits are nibble s / 2 of
    // ql[64*h + 32*(s % 2) + l], high 2 bits are bits 2s..2s+1 of
    // qh[32*h + l]; the 6-bit value is offset by -32.
    for (int i = 0; i < kQK_K; ++i) {
      const int h = i / 128, s = (i / 32) % 4, l = i % 32;
      const int lo = (blk.ql[64 * h + 32 * (s % 2) + l] >> (4 * (s / 2))) & 0x0F;
      const int hi = (blk.qh[32 * h + l] >> (2 * s)) & 3;
      const int q = (lo | (hi << 4)) - 32;
      const float dl = d * float(blk.scales[i / 16]);
      y[i] = dl * float(q);
    }
  }
}

void dequantize_q8_K(const void* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const auto blk = load_block<BlockQ8_K>(src, b);
    for (int i = 0; i < kQK_K; ++i) dst[b * kQK_K + i] = blk.d * float(blk.qs[i]);
  }
}

}  // namespace weir::quant
