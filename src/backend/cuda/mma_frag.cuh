// Quantized weights straight to mma.sync A fragments (m16n8k16, fp16), for
// the MMA tile kernel (ops_mul_mat_mma.cu).
//
// The order of K inside a product does not matter as long as W and x agree,
// so x is stored permuted (mma_x_source) such that each thread's four
// k-slots of an m16n8k16 fragment, (2c, 2c+1) and (2c+8, 2c+9), hold four
// consecutive elements of one scale group: e, e+2 and e+1, e+3. Those come
// from one 32-bit word of the quantized row, two per 16-bit lane: bytes 0
// and 2, then 1 and 3. A nibble or byte b ORed into 0x6400 is the fp16
// number 1024 + b, exactly (a high nibble in place, ORed into 0x5400, is
// 64 + b); subtracting that and the format's offset (bias()) leaves the
// integer weight, and one fma with the group's (d, m) gives d * q + m.
//
// Per 128 elements of a row (ch) and thread c (lane % 4), the 16 k-steps j
// of a 256-element step are j = 8 ch + 4 nib + i, and thread c's elements
// of step j are e = 128 ch + 64 (c / 2) + 32 nib + 16 (c % 2) + 4 i + {0..3}.
// For Q4_K that is the 16 bytes at qs + 64 ch + 16 c: one 16-byte load.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/dequant.cuh"
#include "backend/cuda/plan/kernel_limits.h"

namespace weir::cuda {

// The element of x (within its group of 256) stored at position s.
__host__ __device__ inline int mma_x_source(int s) {
  const int j = s / 16, slot = s % 16;
  const int c = (slot % 8) / 2, sub = (slot & 1) * 2 + slot / 8;
  const int ch = j / 8, nib = (j / 4) % 2, i = j % 4;
  return 128 * ch + 64 * (c / 2) + 32 * nib + 16 * (c % 2) + 4 * i + sub;
}

// A scale group's (d, m) as two fp16 pairs: value = d * q + m.
struct MmaScale {
  uint32_t d2, m2;
};
__device__ __forceinline__ MmaScale mma_scale(float d, float m) {
  const __half2 a = __float2half2_rn(d), b = __float2half2_rn(m);
  return {*reinterpret_cast<const uint32_t*>(&a), *reinterpret_cast<const uint32_t*>(&b)};
}

// (a & b) | c in one LOP3 (the compiler splits two immediates into two).
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
// Two fp16 lanes 1024 + (bits 0-3 of bytes 0 and 2 of w).
__device__ __forceinline__ uint32_t nib_pair(uint32_t w) { return and_or(w, 0x000F000Fu, 0x64006400u); }
// Two fp16 lanes 64 + (bits 4-7 of bytes 0 and 2 of w): under 64's
// exponent the mantissa's step is 1/16, so bits 4-7 count ones. Saves the
// shift a high nibble would need.
__device__ __forceinline__ uint32_t high_nib_pair(uint32_t w) { return and_or(w, 0x00F000F0u, 0x54005400u); }
// An fp16 pair (v, v).
__host__ __device__ constexpr uint32_t half2_const(uint32_t half_bits) { return half_bits | half_bits << 16; }

template <DType T>
struct MmaW {
  static constexpr bool kHas = false;
};

// Q4_K: d, dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles;
// byte l of each 32 holds element l of an even sub-block (low nibble) and
// of the odd one after it (high). Rows must be 16-byte aligned.
template <>
struct MmaW<DType::Q4_K> {
  static constexpr bool kHas = true, kAligned = true;
  static constexpr int BK = 256, kGroups = 8;
  using Regs = uint4;
  __device__ static Regs load(const uint8_t* row, int ch, int c) {
    return *reinterpret_cast<const uint4*>(row + 16 + 64 * ch + 16 * c);
  }
  __device__ static uint2 frag(const Regs& r, int nib, int i, int) {
    const uint32_t w = i == 0 ? r.x : i == 1 ? r.y : i == 2 ? r.z : r.w;
    return nib ? uint2{high_nib_pair(w), high_nib_pair(w >> 8)} : uint2{nib_pair(w), nib_pair(w >> 8)};
  }
  // The fp16 pair frag's lanes exceed the weight's integer by.
  __device__ static uint32_t bias(int nib, int) { return nib ? half2_const(0x5400) : half2_const(0x6400); }
  __device__ static int group(int ch, int nib, int c) { return 4 * ch + 2 * (c >> 1) + nib; }
  __device__ static MmaScale scale(const uint8_t* row, int g) {
    int sc, mn;
    scale_min_k4(g, row + 4, &sc, &mn);
    return mma_scale(h2f(row) * float(sc), -h2f(row + 2) * float(mn));
  }
};

// Q6_K: ql[128] low nibbles, qh[64] two high bits, 16 int8 scales, d.
// Element 128 h + 32 s + l: ql byte 64 h + 32 (s % 2) + l, nibble s / 2;
// qh byte 32 h + l, bits 2 s; scale (128 h + 32 s + l) / 16. Blocks are
// 210 bytes, so words are read at 2-byte alignment.
template <>
struct MmaW<DType::Q6_K> {
  static constexpr bool kHas = true, kAligned = false;
  static constexpr int BK = 256, kGroups = 16;
  struct Regs {
    uint32_t ql[2][4], qh[4];
  };
  __device__ static Regs load(const uint8_t* row, int ch, int c) {
    Regs r;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int nib = 0; nib < 2; ++nib) r.ql[nib][i] = u32_at(row + 64 * ch + 32 * nib + 16 * (c & 1) + 4 * i);
      r.qh[i] = u32_at(row + 128 + 32 * ch + 16 * (c & 1) + 4 * i);
    }
    return r;
  }
  __device__ static uint2 frag(const Regs& r, int nib, int i, int c) {
    const uint32_t l = r.ql[nib][i] >> (4 * (c >> 1)), h = r.qh[i] >> (4 * (c >> 1) + 2 * nib);
    return {and_or(l, 0x000F000Fu, and_or(h << 4, 0x00300030u, 0x64006400u)),
            and_or(l >> 8, 0x000F000Fu, and_or(h >> 4, 0x00300030u, 0x64006400u))};
  }
  __device__ static uint32_t bias(int, int) { return half2_const(0x6420); }  // 1056
  __device__ static int group(int ch, int nib, int c) { return 8 * ch + 4 * (c >> 1) + 2 * nib + (c & 1); }
  __device__ static MmaScale scale(const uint8_t* row, int g) {
    return mma_scale(h2f(row + 208) * float(reinterpret_cast<const int8_t*>(row + 192)[g]), 0.0f);
  }
};

// Q4_0: blocks of 32 (d, 16 bytes): byte l holds elements l (low nibble)
// and l + 16 (high).
template <>
struct MmaW<DType::Q4_0> {
  static constexpr bool kHas = true, kAligned = false;
  static constexpr int BK = 256, kGroups = 8;
  struct Regs {
    uint32_t w[2][4];
  };
  __device__ static Regs load(const uint8_t* row, int ch, int c) {
    Regs r;
#pragma unroll
    for (int nib = 0; nib < 2; ++nib)
#pragma unroll
      for (int i = 0; i < 4; ++i) r.w[nib][i] = u32_at(row + 18 * group(ch, nib, c) + 2 + 4 * i);
    return r;
  }
  __device__ static uint2 frag(const Regs& r, int nib, int i, int c) {  // c odd: the high nibbles
    const uint32_t w = r.w[nib][i], mask = c & 1 ? 0x00F000F0u : 0x000F000Fu;
    const uint32_t magic = c & 1 ? half2_const(0x5400) : half2_const(0x6400);
    return {and_or(w, mask, magic), and_or(w >> 8, mask, magic)};
  }
  // 64 + 8 or 1024 + 8.
  __device__ static uint32_t bias(int, int c) { return c & 1 ? half2_const(0x5480) : half2_const(0x6408); }
  __device__ static int group(int ch, int nib, int c) { return 4 * ch + 2 * (c >> 1) + nib; }
  __device__ static MmaScale scale(const uint8_t* row, int g) { return mma_scale(h2f(row + 18 * g), 0.0f); }
};

// Q8_0: blocks of 32 (d, 32 int8). Steps of 128 elements keep the shared
// memory of a 256-row tile in bounds. Bytes ^ 0x80 are q + 128.
template <>
struct MmaW<DType::Q8_0> {
  static constexpr bool kHas = true, kAligned = false;
  static constexpr int BK = 128, kGroups = 4;
  struct Regs {
    uint32_t w[2][4];
  };
  __device__ static Regs load(const uint8_t* row, int ch, int c) {
    Regs r;
#pragma unroll
    for (int nib = 0; nib < 2; ++nib)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        r.w[nib][i] = u32_at(row + 34 * group(ch, nib, c) + 2 + 16 * (c & 1) + 4 * i) ^ 0x80808080u;
    return r;
  }
  __device__ static uint2 frag(const Regs& r, int nib, int i, int) {
    const uint32_t w = r.w[nib][i];
    return {__byte_perm(w, 0x64u, 0x4240), __byte_perm(w, 0x64u, 0x4341)};
  }
  __device__ static uint32_t bias(int, int) { return half2_const(0x6480); }  // 1152
  __device__ static int group(int, int nib, int c) { return 2 * (c >> 1) + nib; }
  __device__ static MmaScale scale(const uint8_t* row, int g) { return mma_scale(h2f(row + 34 * g), 0.0f); }
};

// The lookup types (iq4_nl, iq4_xs, mxfp4): q4_0's nibble packing (byte l
// of a block's 16 holds elements l (low) and l + 16 (high)), each nibble an
// index into a table of 16 int8 values (dequant.cuh's Table16), looked up
// four at a time (lookup4), then read as Q8_0's bytes: byte ^ 0x80 in an
// fp16 lane's low byte under 0x64 is 1024 + 128 + v.
template <class Tab>
__device__ __forceinline__ uint2 lookup_frag(uint32_t w, int c) {
  const uint32_t x = (c & 1 ? w >> 4 : w) & 0x0F0F0F0Fu;  // the 4 bytes' nibbles
  const uint32_t idx = (x & 0xFu) | (x >> 4 & 0xF0u) | (x >> 8 & 0xF00u) | (x >> 12 & 0xF000u);
  const uint32_t v = lookup4<Tab>(idx) ^ 0x80808080u;
  return {__byte_perm(v, 0x64u, 0x4240), __byte_perm(v, 0x64u, 0x4341)};
}
// A little-endian word at any address (mxfp4's 17-byte blocks).
__device__ __forceinline__ uint32_t u32_bytes(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// The lookup types share all but where a block's 16 nibble bytes start and
// how its scale reads: group g's bytes at kBlock * g + kQs. kByteLoads: the
// blocks are 17 bytes (mxfp4), so words are read a byte at a time.
template <class Tab, int kBlock, int kQs, bool kByteLoads>
struct MmaLookupW {
  static constexpr bool kHas = true, kAligned = false;
  static constexpr int BK = 256, kGroups = 8;
  struct Regs {
    uint32_t w[2][4];
  };
  __device__ static Regs load(const uint8_t* row, int ch, int c) {
    Regs r;
#pragma unroll
    for (int nib = 0; nib < 2; ++nib)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint8_t* p = row + kBlock * group(ch, nib, c) + kQs + 4 * i;
        r.w[nib][i] = kByteLoads ? u32_bytes(p) : u32_at(p);
      }
    return r;
  }
  __device__ static uint2 frag(const Regs& r, int nib, int i, int c) { return lookup_frag<Tab>(r.w[nib][i], c); }
  __device__ static uint32_t bias(int, int) { return half2_const(0x6480); }  // 1152
  __device__ static int group(int ch, int nib, int c) { return 4 * ch + 2 * (c >> 1) + nib; }
};

// IQ4_NL: blocks of 32 (d, 16 nibble bytes), laid out as q4_0's.
template <>
struct MmaW<DType::IQ4_NL> : MmaLookupW<IQ4Table, 18, 2, false> {
  __device__ static MmaScale scale(const uint8_t* row, int g) { return mma_scale(h2f(row + 18 * g), 0.0f); }
};

// IQ4_XS: super-blocks of 256 (d, scales_h, scales_l[4], 128 nibble bytes):
// sub-block j of 32 is iq4_nl's 16 bytes at 8 + 16 j, its scale d * (ls -
// 32) with ls 4 bits of scales_l and 2 of scales_h.
template <>
struct MmaW<DType::IQ4_XS> : MmaLookupW<IQ4Table, 16, 8, false> {
  __device__ static MmaScale scale(const uint8_t* row, int j) {
    const int ls = ((row[4 + j / 2] >> (4 * (j % 2))) & 15) | ((row[2 + j / 4] >> (2 * (j % 4))) & 3) << 4;
    return mma_scale(h2f(row) * float(ls - 32), 0.0f);
  }
};

// MXFP4: blocks of 32 (an E8M0 exponent byte, 16 nibble bytes as q4_0's),
// 17 bytes.
template <>
struct MmaW<DType::MXFP4> : MmaLookupW<MXFP4Table, 17, 1, true> {
  __device__ static MmaScale scale(const uint8_t* row, int g) { return mma_scale(e8m0_half(row[17 * g]), 0.0f); }
};

// fp16 pair d * (h - bias) + m from raw lanes h.
__device__ __forceinline__ uint32_t mma_dequant(uint32_t h, uint32_t bias, MmaScale s) {
  __half2 v = __hsub2(*reinterpret_cast<const __half2*>(&h), *reinterpret_cast<const __half2*>(&bias));
  v = __hfma2(v, *reinterpret_cast<const __half2*>(&s.d2), *reinterpret_cast<const __half2*>(&s.m2));
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The host rules' list of these types (plan/kernel_limits.h: has_mma_tile,
// mma_tile_needs_16_byte_rows) is this one.
template <DType T>
constexpr bool mma_w_listed() {
  if constexpr (MmaW<T>::kHas)
    return has_mma_tile(T) && MmaW<T>::kAligned == mma_tile_needs_16_byte_rows(T);
  else
    return !has_mma_tile(T);
}
template <DType... Ts>
constexpr bool mma_ws_listed() {
  return (mma_w_listed<Ts>() && ...);
}
static_assert(mma_ws_listed<DType::F32, DType::F16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
              DType::Q8_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K,
              DType::IQ4_NL, DType::IQ4_XS, DType::MXFP4, DType::I8, DType::I16, DType::I32, DType::I64,
              DType::F64, DType::BF16>(),
              "has_mma_tile (plan/kernel_limits.h) must list the types MmaW has");

}  // namespace weir::cuda
