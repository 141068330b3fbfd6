// Reference quantizers of the legacy 32-element formats, bit-exact with the
// `gguf` Python package (gguf.quants.quantize), which the test vectors in
// tests/data/quant come from. What "bit-exact" takes, as that code computes:
//   - everything in float32, one rounded operation at a time (the build is
//     ISO C++ without -ffast-math, so the compiler fuses nothing);
//   - q4_0 / q5_0 scale by the element of largest magnitude, sign included
//     (the first one on ties): d = max / -8 (-16), so that element maps to
//     the lowest quant and the one unused level is on the positive side;
//   - quants are trunc(x * id + 8.5) (16.5; 0.5 after "- min" for the _1
//     types), clipped to the range; id = 1 / d, or 0 when d is 0;
//   - q8_0 rounds x * id half away from zero (the package's np_roundf);
//   - scales and mins are rounded to fp16 (nearest even) only when stored:
//     the quants are computed with the float32 scale.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "core/quant/block_formats.h"
#include "core/quant/quantize_blocks.h"

namespace weir::quant {
namespace {

template <typename Block>
void store_block(void* dst, int64_t b, const Block& blk) {
  std::memcpy(static_cast<uint8_t*>(dst) + b * int64_t(sizeof(Block)), &blk, sizeof(Block));
}

// trunc(v) clipped to [0, hi]; also safe for inf / NaN input (gives 0 or hi).
inline uint8_t trunc_clip(float v, int hi) {
  if (!(v > 0.0f)) return 0;
  if (v >= float(hi)) return uint8_t(hi);
  return uint8_t(int(v));
}

// Element of largest magnitude, sign kept; the first one on ties.
inline float signed_absmax(const float* x) {
  float amax = std::fabs(x[0]), max = x[0];
  for (int j = 1; j < kQK; ++j)
    if (std::fabs(x[j]) > amax) { amax = std::fabs(x[j]); max = x[j]; }
  return max;
}

inline void min_max(const float* x, float* mn, float* mx) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < kQK; ++j) {
    if (x[j] < lo) lo = x[j];
    if (x[j] > hi) hi = x[j];
  }
  *mn = lo;
  *mx = hi;
}

inline float inverse(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

// Symmetric 4/5-bit: d = max / -half, q = trunc(x * id + half + 0.5).
template <int kHalf>
void quantize_symmetric(const float* x, float* d_out, uint8_t q[kQK]) {
  const float d = signed_absmax(x) / float(-kHalf);
  const float id = inverse(d);
  for (int j = 0; j < kQK; ++j) q[j] = trunc_clip(x[j] * id + (float(kHalf) + 0.5f), 2 * kHalf - 1);
  *d_out = d;
}

// Affine 4/5-bit: d = (max - min) / qmax, q = trunc((x - min) * id + 0.5).
template <int kQMax>
void quantize_affine(const float* x, float* d_out, float* m_out, uint8_t q[kQK]) {
  float mn, mx;
  min_max(x, &mn, &mx);
  const float d = (mx - mn) / float(kQMax);
  const float id = inverse(d);
  for (int j = 0; j < kQK; ++j) q[j] = trunc_clip((x[j] - mn) * id + 0.5f, kQMax);
  *d_out = d;
  *m_out = mn;
}

// Low nibbles: element j in qs[j % 16], low half for j < 16.
inline void pack_nibbles(const uint8_t q[kQK], uint8_t qs[kQK / 2]) {
  for (int j = 0; j < kQK / 2; ++j) qs[j] = uint8_t((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
}

inline void pack_fifth_bits(const uint8_t q[kQK], uint8_t qh[4]) {
  uint32_t h = 0;
  for (int j = 0; j < kQK; ++j) h |= uint32_t(q[j] >> 4) << j;
  for (int k = 0; k < 4; ++k) qh[k] = uint8_t(h >> (8 * k));
}

}  // namespace

void quantize_q4_0(const float* x, void* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK) {
    float d;
    uint8_t q[kQK];
    quantize_symmetric<8>(x, &d, q);
    BlockQ4_0 blk;
    blk.d = f32_to_fp16(d);
    pack_nibbles(q, blk.qs);
    store_block(dst, b, blk);
  }
}

void quantize_q5_0(const float* x, void* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK) {
    float d;
    uint8_t q[kQK];
    quantize_symmetric<16>(x, &d, q);
    BlockQ5_0 blk;
    blk.d = f32_to_fp16(d);
    pack_fifth_bits(q, blk.qh);
    pack_nibbles(q, blk.qs);
    store_block(dst, b, blk);
  }
}

void quantize_q4_1(const float* x, void* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK) {
    float d, m;
    uint8_t q[kQK];
    quantize_affine<15>(x, &d, &m, q);
    BlockQ4_1 blk;
    blk.d = f32_to_fp16(d);
    blk.m = f32_to_fp16(m);
    pack_nibbles(q, blk.qs);
    store_block(dst, b, blk);
  }
}

void quantize_q5_1(const float* x, void* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK) {
    float d, m;
    uint8_t q[kQK];
    quantize_affine<31>(x, &d, &m, q);
    BlockQ5_1 blk;
    blk.d = f32_to_fp16(d);
    blk.m = f32_to_fp16(m);
    pack_fifth_bits(q, blk.qh);
    pack_nibbles(q, blk.qs);
    store_block(dst, b, blk);
  }
}

void quantize_q8_0(const float* x, void* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = inverse(d);
    BlockQ8_0 blk;
    blk.d = f32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) {
      const float v = std::round(x[j] * id);  // half away from zero
      blk.qs[j] = v == v ? int8_t(std::clamp(v, -127.0f, 127.0f)) : int8_t(0);
    }
    store_block(dst, b, blk);
  }
}

}  // namespace weir::quant
