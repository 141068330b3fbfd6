// Reference dequantization of the lookup formats iq4_nl, iq4_xs and mxfp4,
// whose 4-bit quants index a table of 16 integers (block_formats.h).
//
// Rounding: as the gguf package's numpy code, in float32:
//   iq4_nl:  d * float(value)
//   iq4_xs:  (d * float(ls - 32)) * float(value)
//   mxfp4:   e8m0_to_f32_half(e) * float(value)
// Every product is exact: d has an 11-bit significand, |ls - 32| <= 32 and
// |value| <= 127 add at most 5 + 7 bits, and an mxfp4 scale is a power of
// two (at worst a float32 subnormal times |value| <= 12, still exact, or an
// overflow to infinity for e = 255 with |value| >= 4, as numpy gives). So
// any order of the products gives the same bits.

#include "core/half.h"
#include "core/quant/block_formats.h"
#include "core/quant/dequantize.h"

namespace weir::quant {
namespace {

// The 4-bit index of element i (0..31) of a nibble-packed group of 32.
inline int table_index(const uint8_t* qs, int i) {
  return i < kQK / 2 ? (qs[i] & 0x0F) : (qs[i - kQK / 2] >> 4);
}

}  // namespace

void dequantize_iq4_nl(const void* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const auto blk = load_block<BlockIQ4_NL>(src, b);
    const float d = fp16_to_f32(blk.d);
    for (int i = 0; i < kQK; ++i) dst[b * kQK + i] = d * float(kIQ4NLValues[table_index(blk.qs, i)]);
  }
}

void dequantize_iq4_xs(const void* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const auto blk = load_block<BlockIQ4_XS>(src, b);
    const float d = fp16_to_f32(blk.d);
    for (int j = 0; j < kQK_K / kQK; ++j) {
      const float dl = d * float(iq4_xs_scale(blk, j));
      const uint8_t* qs = blk.qs + j * (kQK / 2);
      for (int i = 0; i < kQK; ++i)
        dst[b * kQK_K + j * kQK + i] = dl * float(kIQ4NLValues[table_index(qs, i)]);
    }
  }
}

void dequantize_mxfp4(const void* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const auto blk = load_block<BlockMXFP4>(src, b);
    const float d = e8m0_to_f32_half(blk.e);
    for (int i = 0; i < kQK; ++i) dst[b * kQK + i] = d * float(kMXFP4Values[table_index(blk.qs, i)]);
  }
}

}  // namespace weir::quant
