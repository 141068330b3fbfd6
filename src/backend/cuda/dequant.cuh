// Device-side dequantization of GGUF block formats, 8 elements at a time:
// Q<T>::dq8(block, g, y) writes elements 8g .. 8g+7 of the block at `block`.
// The float operations are the CPU reference's (core/quant/dequantize_*.cpp):
// products of fp16 scales and small integers are exact in float32, so the
// only rounding is the final subtraction or addition and the values match
// the CPU bit for bit. Plain types (F32, F16, BF16) are read as blocks of 8.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/plan/kernel_limits.h"
#include "core/dtype.h"
#include "core/quant/block_formats.h"

namespace weir::cuda {

__device__ __forceinline__ float h2f(const uint8_t* p) {
  return __half2float(*reinterpret_cast<const __half*>(p));
}
// Little-endian 32-bit word at a 2-byte-aligned address.
__device__ __forceinline__ uint32_t u32_at(const uint8_t* p) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
  return uint32_t(h[0]) | uint32_t(h[1]) << 16;
}

template <DType T>
struct Q;

template <>
struct Q<DType::F32> {
  static constexpr int QK = 8, BYTES = 32;
  __device__ static void dq8(const uint8_t* b, int, float* y) {
    const float4* p = reinterpret_cast<const float4*>(b);
    const float4 a = p[0], c = p[1];
    y[0] = a.x, y[1] = a.y, y[2] = a.z, y[3] = a.w, y[4] = c.x, y[5] = c.y, y[6] = c.z, y[7] = c.w;
  }
};
template <>
struct Q<DType::F16> {
  static constexpr int QK = 8, BYTES = 16;
  __device__ static void dq8(const uint8_t* b, int, float* y) {
    const uint4 v = *reinterpret_cast<const uint4*>(b);
    const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(h[i]);
      y[2 * i] = f.x, y[2 * i + 1] = f.y;
    }
  }
};
template <>
struct Q<DType::BF16> {
  static constexpr int QK = 8, BYTES = 16;
  __device__ static void dq8(const uint8_t* b, int, float* y) {
    const uint4 v = *reinterpret_cast<const uint4*>(b);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      y[2 * i] = __uint_as_float(w[i] << 16);
      y[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
  }
};

// Legacy blocks of 32: low nibbles hold elements 0..15, high nibbles 16..31.
template <>
struct Q<DType::Q4_0> {
  static constexpr int QK = 32, BYTES = 18;
  __device__ static void dq8(const uint8_t* b, int g, float* y) {
    const float d = h2f(b);
    const uint8_t* qs = b + 2 + 8 * (g & 1);
    const int sh = g >= 2 ? 4 : 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = d * float(int((qs[i] >> sh) & 15) - 8);
  }
};
template <>
struct Q<DType::Q4_1> {
  static constexpr int QK = 32, BYTES = 20;
  __device__ static void dq8(const uint8_t* b, int g, float* y) {
    const float d = h2f(b), m = h2f(b + 2);
    const uint8_t* qs = b + 4 + 8 * (g & 1);
    const int sh = g >= 2 ? 4 : 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = d * float((qs[i] >> sh) & 15) + m;
  }
};
template <>
struct Q<DType::Q5_0> {
  static constexpr int QK = 32, BYTES = 22;
  __device__ static void dq8(const uint8_t* b, int g, float* y) {
    const float d = h2f(b);
    const uint32_t qh = u32_at(b + 2) >> (8 * g);
    const uint8_t* qs = b + 6 + 8 * (g & 1);
    const int sh = g >= 2 ? 4 : 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = d * float(int(((qs[i] >> sh) & 15) | ((qh >> i) & 1) << 4) - 16);
  }
};
template <>
struct Q<DType::Q5_1> {
  static constexpr int QK = 32, BYTES = 24;
  __device__ static void dq8(const uint8_t* b, int g, float* y) {
    const float d = h2f(b), m = h2f(b + 2);
    const uint32_t qh = u32_at(b + 4) >> (8 * g);
    const uint8_t* qs = b + 8 + 8 * (g & 1);
    const int sh = g >= 2 ? 4 : 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = d * float(((qs[i] >> sh) & 15) | ((qh >> i) & 1) << 4) + m;
  }
};
template <>
struct Q<DType::Q8_0> {
  static constexpr int QK = 32, BYTES = 34;
  __device__ static void dq8(const uint8_t* b, int g, float* y) {
    const float d = h2f(b);
    const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2 + 8 * g);
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = d * float(qs[i]);
  }
};

// K-quants: super-blocks of 256; see core/quant/block_formats.h.
__device__ __forceinline__ void scale_min_k4(int j, const uint8_t* s, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

template <>
struct Q<DType::Q2_K> {  // scales[16], qs[64], d, dmin
  static constexpr int QK = 256, BYTES = 84;
  __device__ static void dq8(const uint8_t* b, int g, float* y) {
    const int i0 = 8 * g, h = i0 / 128, s = (i0 / 32) % 4, l0 = i0 % 32;
    const float d = h2f(b + 80), dmin = h2f(b + 82);
    const int sc = b[i0 / 16];
    const float dl = d * float(sc & 15), ml = dmin * float(sc >> 4);
    const uint8_t* qs = b + 16 + 32 * h + l0;
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = dl * float((qs[i] >> (2 * s)) & 3) - ml;
  }
};
template <>
struct Q<DType::Q3_K> {  // hmask[32], qs[64], scales[12], d
  static constexpr int QK = 256, BYTES = 110;
  __device__ static void dq8(const uint8_t* b, int g, float* y) {
    const int i0 = 8 * g, h = i0 / 128, s = (i0 / 32) % 4, l0 = i0 % 32, j = i0 / 16;
    const float d = h2f(b + 108);
    const uint8_t* sc = b + 96;
    const int lo = (sc[j % 8] >> (4 * (j / 8))) & 15, hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
    const float dl = d * float((lo | hi << 4) - 32);
    const uint8_t* hm = b + l0;
    const uint8_t* qs = b + 32 + 32 * h + l0;
    const int hb = i0 / 32;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int q = int((qs[i] >> (2 * s)) & 3) - (((hm[i] >> hb) & 1) ? 0 : 4);
      y[i] = dl * float(q);
    }
  }
};
template <>
struct Q<DType::Q4_K> {  // d, dmin, scales[12], qs[128]
  static constexpr int QK = 256, BYTES = 144;
  __device__ static void dq8(const uint8_t* b, int g, float* y) {
    const int i0 = 8 * g, j = i0 / 32, l0 = i0 % 32;
    int sc, mn;
    scale_min_k4(j, b + 4, &sc, &mn);
    const float dl = h2f(b) * float(sc), ml = h2f(b + 2) * float(mn);
    const uint8_t* qs = b + 16 + 32 * (j / 2) + l0;
    const int sh = 4 * (j % 2);
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = dl * float((qs[i] >> sh) & 15) - ml;
  }
};
template <>
struct Q<DType::Q5_K> {  // d, dmin, scales[12], qh[32], qs[128]
  static constexpr int QK = 256, BYTES = 176;
  __device__ static void dq8(const uint8_t* b, int g, float* y) {
    const int i0 = 8 * g, j = i0 / 32, l0 = i0 % 32;
    int sc, mn;
    scale_min_k4(j, b + 4, &sc, &mn);
    const float dl = h2f(b) * float(sc), ml = h2f(b + 2) * float(mn);
    const uint8_t* qh = b + 16 + l0;
    const uint8_t* qs = b + 48 + 32 * (j / 2) + l0;
    const int sh = 4 * (j % 2);
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = dl * float(((qs[i] >> sh) & 15) | ((qh[i] >> j) & 1) << 4) - ml;
  }
};
template <>
struct Q<DType::Q6_K> {  // ql[128], qh[64], scales[16] (int8), d
  static constexpr int QK = 256, BYTES = 210;
  __device__ static void dq8(const uint8_t* b, int g, float* y) {
    const int i0 = 8 * g, h = i0 / 128, s = (i0 / 32) % 4, l0 = i0 % 32;
    const float dl = h2f(b + 208) * float(reinterpret_cast<const int8_t*>(b + 192)[i0 / 16]);
    const uint8_t* ql = b + 64 * h + 32 * (s % 2) + l0;
    const uint8_t* qh = b + 128 + 32 * h + l0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int q = int(((ql[i] >> (4 * (s / 2))) & 15) | ((qh[i] >> (2 * s)) & 3) << 4) - 32;
      y[i] = dl * float(q);
    }
  }
};

// Lookup types: each 4-bit quant indexes a table of 16 int8 values
// (core/quant/block_formats.h), held here as four little-endian words so
// that device code reads them as immediates (a constexpr scalar may be used
// in device code; a host array may not).
constexpr uint32_t pack4(const int8_t* v) {
  return uint32_t(uint8_t(v[0])) | uint32_t(uint8_t(v[1])) << 8 | uint32_t(uint8_t(v[2])) << 16 |
         uint32_t(uint8_t(v[3])) << 24;
}
template <const int8_t* V>
struct Table16 {
  static constexpr uint32_t w0 = pack4(V), w1 = pack4(V + 4), w2 = pack4(V + 8), w3 = pack4(V + 12);
};
using IQ4Table = Table16<quant::kIQ4NLValues>;
using MXFP4Table = Table16<quant::kMXFP4Values>;
// Value q (0..15) of the table, one at a time: the plain reading (the fast
// kernels look four up at once with byte permutes, q8_dot.cuh).
template <class Tab>
__device__ __forceinline__ int table_value(int q) {
  const uint32_t w = q < 4 ? Tab::w0 : q < 8 ? Tab::w1 : q < 12 ? Tab::w2 : Tab::w3;
  return int(int8_t(uint8_t(w >> (8 * (q & 3)))));
}
// e8m0_to_f32_half (block_formats.h): 2^(e - 128) as a float, the float32
// subnormals 2^-128 and 2^-127 for e = 0 and 1.
__device__ __forceinline__ float e8m0_half(uint32_t e) {
  return __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

// Four values at once, for the fast kernels (dequant_half.cuh, q8_dot.cuh):
// a byte permute picks any 4 of 8 bytes (two table words), so one takes the
// indices' low 3 bits in the table's first half, one in its second, and a
// third keeps, byte by byte, the one the index's top bit names.
// prmt.b32 with a selector whose nibbles are already below 8 (the
// intrinsic __byte_perm masks them again: an instruction more each).
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t s) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(s));
  return r;
}
// The values of the 4 indices in the low 16 bits of idx (nibble n: byte n
// of the result).
template <class Tab>
__device__ __forceinline__ uint32_t lookup4(uint32_t idx) {
  const uint32_t lo3 = idx & 0x7777u, top = (idx & 0x8888u) >> 1;  // top: 4 where the index is 8..15
  const uint32_t a = prmt(Tab::w0, Tab::w1, lo3), b = prmt(Tab::w2, Tab::w3, lo3);
  return prmt(a, b, 0x3210u | top);
}

// iq4_nl: d, then nibbles as q4_0: x = d * table[q].
template <>
struct Q<DType::IQ4_NL> {
  static constexpr int QK = 32, BYTES = 18;
  __device__ static void dq8(const uint8_t* b, int g, float* y) {
    const float d = h2f(b);
    const uint8_t* qs = b + 2 + 8 * (g & 1);
    const int sh = g >= 2 ? 4 : 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = d * float(table_value<IQ4Table>((qs[i] >> sh) & 15));
  }
};
// iq4_xs: d, scales_h, scales_l[4], qs[128]; sub-block j of 32 has the
// signed scale ls - 32 and its 16 nibble bytes as iq4_nl's.
template <>
struct Q<DType::IQ4_XS> {
  static constexpr int QK = 256, BYTES = 136;
  __device__ static void dq8(const uint8_t* b, int g, float* y) {
    const int j = g / 4, gg = g % 4;
    const int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 15) | ((b[2 + j / 4] >> (2 * (j % 4))) & 3) << 4;
    const float dl = h2f(b) * float(ls - 32);
    const uint8_t* qs = b + 8 + 16 * j + 8 * (gg & 1);
    const int sh = gg >= 2 ? 4 : 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = dl * float(table_value<IQ4Table>((qs[i] >> sh) & 15));
  }
};
// mxfp4: one E8M0 exponent byte, then nibbles as q4_0 (blocks of 17 bytes:
// no alignment at all, so bytes are read one at a time).
template <>
struct Q<DType::MXFP4> {
  static constexpr int QK = 32, BYTES = 17;
  __device__ static void dq8(const uint8_t* b, int g, float* y) {
    const float d = e8m0_half(b[0]);
    const uint8_t* qs = b + 1 + 8 * (g & 1);
    const int sh = g >= 2 ? 4 : 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = d * float(table_value<MXFP4Table>((qs[i] >> sh) & 15));
  }
};

// Calls f.template operator()<T>() for the dtype t; false when t has no
// device dequantizer.
template <class F>
bool dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::F32: f.template operator()<DType::F32>(); return true;
    case DType::F16: f.template operator()<DType::F16>(); return true;
    case DType::BF16: f.template operator()<DType::BF16>(); return true;
    case DType::Q4_0: f.template operator()<DType::Q4_0>(); return true;
    case DType::Q4_1: f.template operator()<DType::Q4_1>(); return true;
    case DType::Q5_0: f.template operator()<DType::Q5_0>(); return true;
    case DType::Q5_1: f.template operator()<DType::Q5_1>(); return true;
    case DType::Q8_0: f.template operator()<DType::Q8_0>(); return true;
    case DType::Q2_K: f.template operator()<DType::Q2_K>(); return true;
    case DType::Q3_K: f.template operator()<DType::Q3_K>(); return true;
    case DType::Q4_K: f.template operator()<DType::Q4_K>(); return true;
    case DType::Q5_K: f.template operator()<DType::Q5_K>(); return true;
    case DType::Q6_K: f.template operator()<DType::Q6_K>(); return true;
    case DType::IQ4_NL: f.template operator()<DType::IQ4_NL>(); return true;
    case DType::IQ4_XS: f.template operator()<DType::IQ4_XS>(); return true;
    case DType::MXFP4: f.template operator()<DType::MXFP4>(); return true;
    default: return false;
  }
}

// The host rules' list of these types (plan/kernel_limits.h:
// has_dequantizer) is this one: a type has a Q<T> exactly where it lists it.
template <DType T>
inline constexpr bool kHasQ = requires { Q<T>::QK; };
template <DType... Ts>
constexpr bool dequantizers_listed() {
  return ((kHasQ<Ts> == has_dequantizer(Ts)) && ...);
}
static_assert(
    dequantizers_listed<DType::F32, DType::F16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                        DType::Q8_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K,
                        DType::I8, DType::I16, DType::I32, DType::I64, DType::F64, DType::BF16, DType::IQ4_NL,
                        DType::IQ4_XS, DType::MXFP4>(),
    "has_dequantizer (plan/kernel_limits.h) must list the types that have a Q<T>");

}  // namespace weir::cuda
