// Byte layouts of the ggml block quantization formats, exactly as they are
// stored in GGUF files (little-endian). Every struct here is a plain array of
// bytes / uint16 / float with no padding, so its size equals the type_size in
// the dtype traits table (checked by the static_asserts below).
//
// Fields named `d`, `m`, `dmin` of type uint16_t hold IEEE fp16 bit patterns
// (convert with weir::fp16_to_f32 from core/half.h).
//
// Tensor data is only guaranteed to be 2-byte aligned per block (4-byte for
// block_q8_K), so code that walks an arbitrary byte pointer should memcpy a
// block out (as the reference dequantizers do) or make sure of the alignment.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace weir::quant {

constexpr int kQK = 32;     // elements per block of the legacy formats
constexpr int kQK_K = 256;  // elements per super-block of the K-quants
constexpr int kKScaleSize = 12;  // packed 6-bit scales of q4_K / q5_K

// ---------------------------------------------------------------------------
// Legacy formats: 32 elements per block, one fp16 scale (+ fp16 min for _1).
// Element i of the block is held in qs[i % 16], low nibble for i < 16 and
// high nibble for i >= 16 (for q8_0: qs[i] directly).
// ---------------------------------------------------------------------------

// q4_0: x = d * (q - 8), q in [0, 15].
struct BlockQ4_0 {
  uint16_t d;             // fp16 scale
  uint8_t qs[kQK / 2];    // nibbles: qs[j] = q[j] | q[j + 16] << 4
};

// q4_1: x = d * q + m, q in [0, 15].
struct BlockQ4_1 {
  uint16_t d;             // fp16 scale
  uint16_t m;             // fp16 min (offset)
  uint8_t qs[kQK / 2];    // nibbles as in q4_0
};

// q5_0: x = d * (q - 16), q in [0, 31]. The low 4 bits are nibbles as in
// q4_0; bit 4 of element i is bit i of qh read as a little-endian uint32.
struct BlockQ5_0 {
  uint16_t d;             // fp16 scale
  uint8_t qh[4];          // 5th bits, element i -> bit i (LE uint32)
  uint8_t qs[kQK / 2];    // low nibbles as in q4_0
};

// q5_1: x = d * q + m, q in [0, 31]; bits laid out as in q5_0.
struct BlockQ5_1 {
  uint16_t d;             // fp16 scale
  uint16_t m;             // fp16 min (offset)
  uint8_t qh[4];          // 5th bits, element i -> bit i (LE uint32)
  uint8_t qs[kQK / 2];    // low nibbles as in q4_0
};

// q8_0: x = d * q, q a signed byte.
struct BlockQ8_0 {
  uint16_t d;             // fp16 scale
  int8_t qs[kQK];         // quants
};

// ---------------------------------------------------------------------------
// K-quants: super-blocks of 256 elements split into sub-blocks (16 of 16
// elements for q2_K, q3_K, q6_K; 8 of 32 for q4_K, q5_K), each sub-block
// with its own small integer scale (and min) multiplied by the fp16
// super-block scale d (and dmin).
// ---------------------------------------------------------------------------

// q2_K: x = (d * (sc & 15)) * q - (dmin * (sc >> 4)), q in [0, 3], with sc =
// scales[i / 16]. 2-bit quants: element i = 128*h + 32*s + l (h in 0..1,
// s in 0..3, l in 0..31) is (qs[32*h + l] >> 2*s) & 3.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // low nibble: scale, high nibble: min
  uint8_t qs[kQK_K / 4];       // 2-bit quants
  uint16_t d;                  // fp16 super-block scale for the scales
  uint16_t dmin;               // fp16 super-block scale for the mins
};

// q3_K: x = (d * (sc - 32)) * (q - 4 * !hbit), q in [0, 3], with sc the
// 6-bit scale of sub-block i / 16. Element i = 128*h + 32*s + l:
//   low 2 bits: (qs[32*h + l] >> 2*s) & 3
//   high bit:   (hmask[l] >> (i / 32)) & 1 -- when it is 0, 4 is subtracted
// The 16 6-bit scales are packed in 12 bytes:
//   sc[j] low 4 bits:  scales[j % 8] >> 4*(j / 8)
//   sc[j] high 2 bits: (scales[8 + j % 4] >> 2*(j / 4)) & 3
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];  // high bits of the quants
  uint8_t qs[kQK_K / 4];     // low 2 bits of the quants
  uint8_t scales[12];        // 16 packed 6-bit scales
  uint16_t d;                // fp16 super-block scale
};

// q4_K: x = (d * sc[j]) * q - (dmin * mn[j]), q in [0, 15], j = i / 32.
// Element i = 64*c + 32*k + l (c in 0..3, k in 0..1, l in 0..31) is
// (qs[32*c + l] >> 4*k) & 15. The 8 6-bit scales and mins are packed in 12
// bytes (see unpack_scale_min_k4):
//   j < 4:  sc = scales[j] & 63            mn = scales[j + 4] & 63
//   j >= 4: sc = (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4
//           mn = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4
struct BlockQ4_K {
  uint16_t d;                   // fp16 super-block scale for the scales
  uint16_t dmin;                // fp16 super-block scale for the mins
  uint8_t scales[kKScaleSize];  // packed 6-bit scales and mins
  uint8_t qs[kQK_K / 2];        // 4-bit quants
};

// q5_K: as q4_K with q in [0, 31]; bit 4 of element i is
// (qh[i % 32] >> (i / 32)) & 1.
struct BlockQ5_K {
  uint16_t d;                   // fp16 super-block scale for the scales
  uint16_t dmin;                // fp16 super-block scale for the mins
  uint8_t scales[kKScaleSize];  // packed 6-bit scales and mins
  uint8_t qh[kQK_K / 8];        // high bits of the quants
  uint8_t qs[kQK_K / 2];        // low 4 bits of the quants
};

// q6_K: x = (d * scales[i / 16]) * (q - 32), q in [0, 63]. Element
// i = 128*h + 32*s + l (h in 0..1, s in 0..3, l in 0..31):
//   low 4 bits:  (ql[64*h + 32*(s & 1) + l] >> 4*(s >> 1)) & 15
//   high 2 bits: (qh[32*h + l] >> 2*s) & 3
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];       // low 4 bits of the quants
  uint8_t qh[kQK_K / 4];       // high 2 bits of the quants
  int8_t scales[kQK_K / 16];   // signed 8-bit sub-block scales
  uint16_t d;                  // fp16 super-block scale
};

// q8_K: x = d * q. Used for activations in the K-quant dot products; bsums
// holds the sums of each group of 16 quants and plays no part in
// dequantization.
struct BlockQ8_K {
  float d;                     // fp32 scale
  int8_t qs[kQK_K];            // quants
  int16_t bsums[kQK_K / 16];   // sum of qs[16*g .. 16*g + 15]
};

// ---------------------------------------------------------------------------
// Lookup formats: each 4-bit quant indexes a fixed table of 16 small
// integers, scaled per block. Nibbles are packed as in q4_0 (element i of a
// 32-element group in qs[i % 16], low nibble for i < 16).
// ---------------------------------------------------------------------------

// The non-linear value table of iq4_nl and iq4_xs (ggml's kvalues_iq4nl).
inline constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// The E2M1 (fp4) values of mxfp4, doubled so they are integers: element =
// e8m0_to_f32_half(e) * kMXFP4Values[q] (ggml's kvalues_mxfp4). Bit 3 is the
// sign, so 0 and 8 both stand for zero.
inline constexpr int8_t kMXFP4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// iq4_nl: x = d * kIQ4NLValues[q], q in [0, 15].
struct BlockIQ4_NL {
  uint16_t d;             // fp16 scale
  uint8_t qs[kQK / 2];    // nibbles as in q4_0
};

// iq4_xs: super-block of 256 in 8 sub-blocks of 32; element i of sub-block
// j is d * (ls[j] - 32) * kIQ4NLValues[q], q the nibble i of qs[16*j ..
// 16*j + 15] (packed as in q4_0). The 6-bit ls[j] is split:
//   low 4 bits:  (scales_l[j / 2] >> 4*(j % 2)) & 15
//   high 2 bits: (scales_h >> 2*j) & 3
struct BlockIQ4_XS {
  uint16_t d;                   // fp16 super-block scale
  uint16_t scales_h;            // high 2 bits of the 8 sub-block scales
  uint8_t scales_l[kQK_K / 64]; // low 4 bits, two sub-blocks a byte
  uint8_t qs[kQK_K / 2];        // nibbles, 16 bytes per sub-block
};

// mxfp4 (OCP microscaling): x = 2^(e - 127) * fp4(q) = e8m0_to_f32_half(e)
// * kMXFP4Values[q]. One shared E8M0 exponent byte per 32 elements.
struct BlockMXFP4 {
  uint8_t e;              // E8M0 shared scale (a biased power of two)
  uint8_t qs[kQK / 2];    // E2M1 nibbles as in q4_0
};

// Half of the E8M0 scale 2^(e - 127) as a float32 (ggml's
// GGML_E8M0_TO_FP32_HALF): 2^(e - 128), the float32 subnormals 2^-128 and
// 2^-127 for e = 0 and 1. Exact for every e.
inline float e8m0_to_f32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? uint32_t(0x00200000) << e : uint32_t(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockMXFP4) == 17);

static_assert(offsetof(BlockQ5_0, qs) == 6);
static_assert(offsetof(BlockQ5_1, qs) == 8);
static_assert(offsetof(BlockQ2_K, d) == 80);
static_assert(offsetof(BlockQ3_K, d) == 108);
static_assert(offsetof(BlockQ4_K, qs) == 16);
static_assert(offsetof(BlockQ5_K, qs) == 48);
static_assert(offsetof(BlockQ6_K, d) == 208);
static_assert(offsetof(BlockQ8_K, bsums) == 260);
static_assert(offsetof(BlockIQ4_XS, qs) == 8);

// Copies block b (0-based) out of a byte stream of blocks. Tensor data need
// not be aligned for the block struct; memcpy also keeps aliasing rules.
template <typename Block>
inline Block load_block(const void* src, int64_t b) {
  Block blk;
  std::memcpy(&blk, static_cast<const uint8_t*>(src) + b * int64_t(sizeof(Block)), sizeof(Block));
  return blk;
}

// Unpacks the 6-bit scale and min of sub-block j (0..7) of a q4_K / q5_K
// super-block (ggml's get_scale_min_k4).
inline void unpack_scale_min_k4(int j, const uint8_t* scales, uint8_t* sc, uint8_t* mn) {
  if (j < 4) {
    *sc = uint8_t(scales[j] & 63);
    *mn = uint8_t(scales[j + 4] & 63);
  } else {
    *sc = uint8_t((scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4));
    *mn = uint8_t((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

// Unpacks the 16 signed 6-bit scales of a q3_K super-block, minus 32 (so in
// [-32, 31]).
inline void unpack_scales_q3_K(const uint8_t* scales, int8_t out[16]) {
  for (int j = 0; j < 16; ++j) {
    const int lo = (scales[j % 8] >> (4 * (j / 8))) & 0x0F;
    const int hi = (scales[8 + j % 4] >> (2 * (j / 4))) & 0x03;
    out[j] = int8_t((lo | (hi << 4)) - 32);
  }
}

// The signed scale ls[j] - 32 (in [-32, 31]) of sub-block j (0..7) of an
// iq4_xs super-block.
inline int iq4_xs_scale(const BlockIQ4_XS& b, int j) {
  const int lo = (b.scales_l[j / 2] >> (4 * (j % 2))) & 0x0F;
  const int hi = (b.scales_h >> (2 * j)) & 0x03;
  return (lo | (hi << 4)) - 32;
}

}  // namespace weir::quant
