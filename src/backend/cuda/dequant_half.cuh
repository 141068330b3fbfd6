// Dequantization of 8 elements straight to fp16 (a uint4 of 8 halves), for
// the tensor-core paths: dq8_half<T>(block, g) is elements 8g .. 8g+7 of the
// block. The types of common models take a short integer path (bytes
// placed in a float's mantissa, one fma each, no int-to-float conversion);
// the rest go through Q<T>::dq8 (dequant.cuh), which stays the reference.
// Blocks need only 2-byte alignment.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/dequant.cuh"

namespace weir::cuda {

__device__ __forceinline__ uint32_t half2_bits(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Byte i of w as a float: placed under the exponent of 2^23, exact.
__device__ __forceinline__ float byte_f(uint32_t w, int i) {
  return __int_as_float(int(__byte_perm(w, 0x4B000000u, 0x7540u | unsigned(i)))) - 8388608.0f;
}

// fp16(d * b + off) for the 8 bytes b of lo (first 4) and hi.
__device__ __forceinline__ uint4 fma_bytes_half8(uint32_t lo, uint32_t hi, float d, float off) {
  uint4 r;
  r.x = half2_bits(fmaf(d, byte_f(lo, 0), off), fmaf(d, byte_f(lo, 1), off));
  r.y = half2_bits(fmaf(d, byte_f(lo, 2), off), fmaf(d, byte_f(lo, 3), off));
  r.z = half2_bits(fmaf(d, byte_f(hi, 0), off), fmaf(d, byte_f(hi, 1), off));
  r.w = half2_bits(fmaf(d, byte_f(hi, 2), off), fmaf(d, byte_f(hi, 3), off));
  return r;
}

template <DType T>
__device__ __forceinline__ uint4 dq8_half(const uint8_t* b, int g) {
  float v[8];
  Q<T>::dq8(b, g, v);
  return {half2_bits(v[0], v[1]), half2_bits(v[2], v[3]), half2_bits(v[4], v[5]), half2_bits(v[6], v[7])};
}

template <>
__device__ __forceinline__ uint4 dq8_half<DType::Q4_0>(const uint8_t* b, int g) {
  const float d = h2f(b);
  const uint8_t* qs = b + 2 + 8 * (g & 1);
  const int sh = g >= 2 ? 4 : 0;
  const uint32_t lo = (u32_at(qs) >> sh) & 0x0F0F0F0Fu, hi = (u32_at(qs + 4) >> sh) & 0x0F0F0F0Fu;
  return fma_bytes_half8(lo, hi, d, -8.0f * d);
}

template <>
__device__ __forceinline__ uint4 dq8_half<DType::Q8_0>(const uint8_t* b, int g) {
  const float d = h2f(b);
  const uint8_t* qs = b + 2 + 8 * g;
  // q + 128 as unsigned bytes.
  return fma_bytes_half8(u32_at(qs) ^ 0x80808080u, u32_at(qs + 4) ^ 0x80808080u, d, -128.0f * d);
}

template <>
__device__ __forceinline__ uint4 dq8_half<DType::Q4_K>(const uint8_t* b, int g) {
  const int j = g / 4, l0 = 8 * (g % 4);
  int sc, mn;
  scale_min_k4(j, b + 4, &sc, &mn);
  const float dl = h2f(b) * float(sc), ml = h2f(b + 2) * float(mn);
  const uint8_t* qs = b + 16 + 32 * (j / 2) + l0;
  const int sh = 4 * (j % 2);
  const uint32_t lo = (u32_at(qs) >> sh) & 0x0F0F0F0Fu, hi = (u32_at(qs + 4) >> sh) & 0x0F0F0F0Fu;
  return fma_bytes_half8(lo, hi, dl, -ml);
}

template <>
__device__ __forceinline__ uint4 dq8_half<DType::Q6_K>(const uint8_t* b, int g) {
  const int i0 = 8 * g, h = i0 / 128, s = (i0 / 32) % 4, l0 = i0 % 32;
  const float dl = h2f(b + 208) * float(reinterpret_cast<const int8_t*>(b + 192)[i0 / 16]);
  const uint8_t* ql = b + 64 * h + 32 * (s % 2) + l0;
  const uint8_t* qh = b + 128 + 32 * h + l0;
  const int sl = 4 * (s / 2), shh = 2 * s;
  const uint32_t lo = ((u32_at(ql) >> sl) & 0x0F0F0F0Fu) | ((u32_at(qh) >> shh) & 0x03030303u) << 4;
  const uint32_t hi = ((u32_at(ql + 4) >> sl) & 0x0F0F0F0Fu) | ((u32_at(qh + 4) >> shh) & 0x03030303u) << 4;
  return fma_bytes_half8(lo, hi, dl, -32.0f * dl);
}

// The lookup types: 8 nibbles (the low or the high ones of 8 quant bytes)
// looked up four at a time (dequant.cuh: lookup4, on the indices packed as
// a permute's selector), each value v made a float exactly (as byte_f's
// v + 128, less 128), then d * v: the reference's one rounding, so the same
// fp16 values (also where d * v overflows: mxfp4's largest exponents).
// The 4 bytes of w (each 0..15) as the nibbles of a 16-bit selector.
__device__ __forceinline__ uint32_t bytes_to_nibbles(uint32_t w) {
  const uint32_t s = prmt(w, 0, 0x3120u);  // bytes 0, 2, 1, 3
  return s | (s >> 12);
}
template <class Tab>
__device__ __forceinline__ uint4 lookup_half8(uint32_t lo, uint32_t hi, float d) {
  const uint32_t a = lookup4<Tab>(bytes_to_nibbles(lo)) ^ 0x80808080u;
  const uint32_t b = lookup4<Tab>(bytes_to_nibbles(hi)) ^ 0x80808080u;
  const auto v = [&](uint32_t w, int i) { return d * (byte_f(w, i) - 128.0f); };
  return {half2_bits(v(a, 0), v(a, 1)), half2_bits(v(a, 2), v(a, 3)), half2_bits(v(b, 0), v(b, 1)),
          half2_bits(v(b, 2), v(b, 3))};
}

template <>
__device__ __forceinline__ uint4 dq8_half<DType::IQ4_NL>(const uint8_t* b, int g) {
  const uint8_t* qs = b + 2 + 8 * (g & 1);
  const int sh = g >= 2 ? 4 : 0;
  const uint32_t lo = (u32_at(qs) >> sh) & 0x0F0F0F0Fu, hi = (u32_at(qs + 4) >> sh) & 0x0F0F0F0Fu;
  return lookup_half8<IQ4Table>(lo, hi, h2f(b));
}

template <>
__device__ __forceinline__ uint4 dq8_half<DType::IQ4_XS>(const uint8_t* b, int g) {
  const int j = g / 4, gg = g % 4;
  const int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 15) | ((b[2 + j / 4] >> (2 * (j % 4))) & 3) << 4;
  const uint8_t* qs = b + 8 + 16 * j + 8 * (gg & 1);
  const int sh = gg >= 2 ? 4 : 0;
  const uint32_t lo = (u32_at(qs) >> sh) & 0x0F0F0F0Fu, hi = (u32_at(qs + 4) >> sh) & 0x0F0F0F0Fu;
  return lookup_half8<IQ4Table>(lo, hi, h2f(b) * float(ls - 32));
}

// mxfp4's blocks have no alignment: its bytes are read one at a time.
__device__ __forceinline__ uint32_t u32_bytes(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
template <>
__device__ __forceinline__ uint4 dq8_half<DType::MXFP4>(const uint8_t* b, int g) {
  const uint8_t* qs = b + 1 + 8 * (g & 1);
  const int sh = g >= 2 ? 4 : 0;
  const uint32_t lo = (u32_bytes(qs) >> sh) & 0x0F0F0F0Fu, hi = (u32_bytes(qs + 4) >> sh) & 0x0F0F0F0Fu;
  return lookup_half8<MXFP4Table>(lo, hi, e8m0_half(b[0]));
}

}  // namespace weir::cuda
