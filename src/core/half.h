// IEEE half and bfloat16 conversions (bit-exact, no hardware dependence).
#pragma once
#include <cstdint>
#include <cstring>

namespace weir {

inline float f32_from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t bits_from_f32(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

inline float fp16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    if (mant == 0) return f32_from_bits(sign);
    // subnormal: normalise
    int e = -1;
    do { mant <<= 1; ++e; } while ((mant & 0x400) == 0);
    mant &= 0x3ff;
    return f32_from_bits(sign | (uint32_t(127 - 15 - e) << 23) | (mant << 13));
  }
  if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
  return f32_from_bits(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

// Round to nearest even, as numpy's float16 cast does.
inline uint16_t f32_to_fp16(float f) {
  const uint32_t x = bits_from_f32(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t ax = x & 0x7fffffff;
  if (ax >= 0x7f800000) return uint16_t(sign | 0x7c00 | (ax > 0x7f800000 ? 0x200 : 0));
  if (ax >= 0x477ff000) return uint16_t(sign | 0x7c00);  // overflow to inf
  if (ax < 0x38800000) {  // subnormal or zero in half
    if (ax < 0x33000000) return uint16_t(sign);
    const uint32_t e = ax >> 23;
    const uint32_t m = (ax & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = ((ax >> 13) - ((127 - 15) << 10));
  const uint32_t rem = ax & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) ++r;
  return uint16_t(sign | r);
}

inline float bf16_to_f32(uint16_t h) { return f32_from_bits(uint32_t(h) << 16); }

// Round to nearest even; NaN stays NaN (as ggml does).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = bits_from_f32(f);
  if ((u & 0x7fffffff) > 0x7f800000) return uint16_t((u >> 16) | 64);
  return uint16_t((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

}  // namespace weir
