// Internals of the K-quant dot kernels (qdot_k*.cpp only; not an interface).
//
// The float order every level follows (llama.cpp's AVX2 kernels): per
// super-block the weight x activation products are summed exactly in 8 int32
// lanes, lane k holding the elements i with (i % 32) / 4 == k, each already
// multiplied by its sub-block scale. The lanes are converted to float and
// fused-multiply-added into 8 float lanes with d = y.d * x.d. The mins
// (q2_K, q4_K, q5_K) go their own way, see each type. At the end the 8 lanes
// are summed as hsum8 below.
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/cpu/qdot.h"

namespace weir::cpu::qk {

// Kernels at exactly one level; empty for types they do not cover.
QDotKernels reference_kernels(DType w);
QDotKernels avx2_kernels(DType w);
QDotKernels avx512_kernels(DType w);
QDotKernels avx512_vnni_kernels(DType w);

// Index of element i's int32 lane in a super-block (see above).
constexpr int lane_of(int i) { return (i % 32) / 4; }

// Horizontal sum of 8 float lanes in the order of ggml's hsum_float_8: the
// two halves added lane by lane, then lanes 0+2 and 1+3, then those two.
inline float hsum8(const float v[8]) {
  float r[4];
  for (int i = 0; i < 4; ++i) r[i] = v[i + 4] + v[i];
  return (r[0] + r[2]) + (r[1] + r[3]);
}

// Same order for 4 lanes (q4_K's mins): 0+2, 1+3, then those two.
inline float hsum4(const float v[4]) { return (v[0] + v[2]) + (v[1] + v[3]); }

// Unpacks the 8 scales and 8 mins of a q4_K / q5_K block (12 packed bytes)
// four at a time in 32-bit words: bytes 0-3 (a) hold scales 0-3 in their low
// 6 bits and the top 2 bits of scales 4-7; bytes 4-7 (b) the same for mins;
// bytes 8-11 (c) the low 4 bits of scales 4-7 (low nibbles) and mins 4-7.
inline void unpack_scales_mins_k4(const uint8_t* packed, uint8_t sc[8], uint8_t mn[8]) {
  uint32_t a, b, c;
  __builtin_memcpy(&a, packed, 4);
  __builtin_memcpy(&b, packed + 4, 4);
  __builtin_memcpy(&c, packed + 8, 4);
  const uint32_t sc_lo = a & 0x3f3f3f3fu;
  const uint32_t mn_lo = b & 0x3f3f3f3fu;
  const uint32_t sc_hi = (c & 0x0f0f0f0fu) | (((a >> 6) & 0x03030303u) << 4);
  const uint32_t mn_hi = ((c >> 4) & 0x0f0f0f0fu) | (((b >> 6) & 0x03030303u) << 4);
  __builtin_memcpy(sc, &sc_lo, 4);
  __builtin_memcpy(sc + 4, &sc_hi, 4);
  __builtin_memcpy(mn, &mn_lo, 4);
  __builtin_memcpy(mn + 4, &mn_hi, 4);
}

// Unpacks the 16 6-bit scales of a q3_K block (0..63; the value is minus 32)
// four at a time, as unpack_scales_q3_K does one at a time: low nibbles from
// bytes 0-7 (scales 0-7 low, 8-15 high nibble), top 2 bits from bytes 8-11
// at bit 2 * (j / 4).
inline void unpack_scales_q3_K_raw(const uint8_t* packed, uint8_t out[16]) {
  uint32_t a, b, c;
  __builtin_memcpy(&a, packed, 4);
  __builtin_memcpy(&b, packed + 4, 4);
  __builtin_memcpy(&c, packed + 8, 4);
  const uint32_t w[4] = {
      (a & 0x0f0f0f0fu) | (((c >> 0) & 0x03030303u) << 4),
      (b & 0x0f0f0f0fu) | (((c >> 2) & 0x03030303u) << 4),
      ((a >> 4) & 0x0f0f0f0fu) | (((c >> 4) & 0x03030303u) << 4),
      ((b >> 4) & 0x0f0f0f0fu) | (((c >> 6) & 0x03030303u) << 4),
  };
  __builtin_memcpy(out, w, 16);
}

}  // namespace weir::cpu::qk
