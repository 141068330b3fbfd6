// Fast row dequantizers for the CPU kernels. Each one computes exactly what
// the reference dequantizer in core/quant computes (same products, same
// rounding order, no fused multiply-add): portable versions written as short
// fixed-length loops that GCC vectorizes (used for the AVX2 and baseline
// builds), and AVX-512 versions with intrinsics. Tests compare every version
// with dequantize_row bit for bit.

// The reference rounds a*b and then subtracts; keep the compiler from fusing.
#pragma GCC optimize("fp-contract=off")

#include "backend/cpu/ops_dequant.h"

#include <cstring>

#include "backend/cpu/ops_simd.h"
#include "core/half.h"
#include "core/quant/block_formats.h"

namespace weir::cpu {
namespace {

using simd::fp16_to_f32_fast;

WEIR_INLINE uint16_t rd16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
WEIR_INLINE uint32_t rd32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

WEIR_INLINE float half(const uint8_t* p) { return fp16_to_f32_fast(rd16(p)); }

// --- Portable versions: short fixed loops that GCC vectorizes (AVX2 and
// baseline builds of dequant_impl below). ----------------------------------

WEIR_INLINE void row_f16(const uint8_t* s, float* __restrict y, int64_t k) {
  for (int64_t i = 0; i < k; ++i) y[i] = fp16_to_f32_fast(rd16(s + 2 * i));
}

WEIR_INLINE void row_bf16(const uint8_t* s, float* __restrict y, int64_t k) {
  for (int64_t i = 0; i < k; ++i) {
    const uint32_t u = uint32_t(rd16(s + 2 * i)) << 16;
    std::memcpy(y + i, &u, 4);
  }
}

// q4_0: 18-byte blocks {d, qs[16]}; x = d * (q - 8).
WEIR_INLINE void row_q4_0(const uint8_t* s, float* __restrict y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, s += 18, y += 32) {
    const float d = half(s);
    const uint8_t* qs = s + 2;
    for (int j = 0; j < 16; ++j) {
      y[j] = d * float(int(qs[j] & 15) - 8);
      y[j + 16] = d * float(int(qs[j] >> 4) - 8);
    }
  }
}

// q5_0: 22-byte blocks {d, qh[4], qs[16]}; x = d * (q - 16); bit 4 of
// element i is bit i of qh.
WEIR_INLINE void row_q5_0(const uint8_t* s, float* __restrict y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, s += 22, y += 32) {
    const float d = half(s);
    const uint32_t qh = rd32(s + 2);
    const uint8_t* qs = s + 6;
    for (int j = 0; j < 16; ++j) {
      const int lo = int(qs[j] & 15) | int(((qh >> j) & 1) << 4);
      const int hi = int(qs[j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
      y[j] = d * float(lo - 16);
      y[j + 16] = d * float(hi - 16);
    }
  }
}

// q8_0: 34-byte blocks {d, qs[32]}; x = d * q.
WEIR_INLINE void row_q8_0(const uint8_t* s, float* __restrict y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, s += 34, y += 32) {
    const float d = half(s);
    const int8_t* qs = reinterpret_cast<const int8_t*>(s + 2);
    for (int j = 0; j < 32; ++j) y[j] = d * float(qs[j]);
  }
}

// q4_K: 144-byte super-blocks {d, dmin, scales[12], qs[128]};
// x = (d * sc) * q - (dmin * mn) per 32-element sub-block.
WEIR_INLINE void row_q4_K(const uint8_t* s, float* __restrict y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, s += 144, y += 256) {
    const float d = half(s);
    const float dmin = half(s + 2);
    const uint8_t* scales = s + 4;
    const uint8_t* qs = s + 16;
    for (int c = 0; c < 4; ++c) {
      uint8_t sc0, mn0, sc1, mn1;
      quant::unpack_scale_min_k4(2 * c, scales, &sc0, &mn0);
      quant::unpack_scale_min_k4(2 * c + 1, scales, &sc1, &mn1);
      const float dl0 = d * float(sc0), ml0 = dmin * float(mn0);
      const float dl1 = d * float(sc1), ml1 = dmin * float(mn1);
      const uint8_t* q = qs + 32 * c;
      float* yc = y + 64 * c;
      for (int l = 0; l < 32; ++l) {
        const float a = dl0 * float(q[l] & 15);
        const float bq = dl1 * float(q[l] >> 4);
        yc[l] = a - ml0;
        yc[l + 32] = bq - ml1;
      }
    }
  }
}

// q6_K: 210-byte super-blocks {ql[128], qh[64], scales[16] (int8), d};
// x = (d * sc) * (q - 32) per 16-element sub-block.
WEIR_INLINE void row_q6_K(const uint8_t* s, float* __restrict y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, s += 210, y += 256) {
    const uint8_t* ql = s;
    const uint8_t* qh = s + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(s + 192);
    const float d = half(s + 208);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* l0 = ql + 64 * h;
      const uint8_t* hh = qh + 32 * h;
      float* yh = y + 128 * h;
      // Element 32*s + l (l = 16*part + i) is in sub-block 8h + 2s + part.
      for (int part = 0; part < 2; ++part) {
        const int j = 8 * h + part;
        const float d0 = d * float(sc[j]), d1 = d * float(sc[j + 2]);
        const float d2 = d * float(sc[j + 4]), d3 = d * float(sc[j + 6]);
        for (int i = 0; i < 16; ++i) {
          const int l = 16 * part + i;
          const int q0 = int(l0[l] & 15) | int(((hh[l] >> 0) & 3) << 4);
          const int q1 = int(l0[l + 32] & 15) | int(((hh[l] >> 2) & 3) << 4);
          const int q2 = int(l0[l] >> 4) | int(((hh[l] >> 4) & 3) << 4);
          const int q3 = int(l0[l + 32] >> 4) | int(((hh[l] >> 6) & 3) << 4);
          yh[l] = d0 * float(q0 - 32);
          yh[l + 32] = d1 * float(q1 - 32);
          yh[l + 64] = d2 * float(q2 - 32);
          yh[l + 96] = d3 * float(q3 - 32);
        }
      }
    }
  }
}

// --- AVX-512 versions (GCC 12 widens bytes to 32-bit lanes poorly when it
// vectorizes the loops above, so these spell the conversions out). ---------

// The fp16 scale at p, widened by the F16C unit (exact), in all 16 lanes.
WEIR_TARGET_AVX512 WEIR_INLINE __m512 half16(const uint8_t* p) {
  return _mm512_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(rd16(p))));
}
WEIR_TARGET_AVX512 WEIR_INLINE float half_f16c(const uint8_t* p) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(rd16(p))));
}

WEIR_TARGET_AVX512 WEIR_INLINE __m512 u8x16_to_ps(__m128i v) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v));
}

WEIR_TARGET_AVX512 void row_f16_avx512(const uint8_t* s, float* __restrict y, int64_t k) {
  int64_t i = 0;
  for (; i + 16 <= k; i += 16)
    _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 2 * i))));
  for (; i < k; ++i) y[i] = fp16_to_f32_fast(rd16(s + 2 * i));
}

WEIR_TARGET_AVX512 void row_bf16_avx512(const uint8_t* s, float* __restrict y, int64_t k) {
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 2 * i)));
    _mm512_storeu_si512(y + i, _mm512_slli_epi32(u, 16));
  }
  row_bf16(s + 2 * i, y + i, k - i);
}

WEIR_TARGET_AVX512 void row_q4_0_avx512(const uint8_t* s, float* __restrict y, int64_t nb) {
  const __m128i m4 = _mm_set1_epi8(15);
  const __m512 eight = _mm512_set1_ps(8.0f);
  for (int64_t b = 0; b < nb; ++b, s += 18, y += 32) {
    const __m512 d = half16(s);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 2));
    // float(q) - 8 is exact, as is float(q - 8).
    _mm512_storeu_ps(y, _mm512_mul_ps(d, _mm512_sub_ps(u8x16_to_ps(_mm_and_si128(q, m4)), eight)));
    _mm512_storeu_ps(y + 16, _mm512_mul_ps(d, _mm512_sub_ps(u8x16_to_ps(_mm_and_si128(_mm_srli_epi16(q, 4), m4)), eight)));
  }
}

WEIR_TARGET_AVX512 void row_q5_0_avx512(const uint8_t* s, float* __restrict y, int64_t nb) {
  const __m128i m4 = _mm_set1_epi8(15);
  const __m512i sixteen = _mm512_set1_epi32(16);
  for (int64_t b = 0; b < nb; ++b, s += 22, y += 32) {
    const __m512 d = half16(s);
    const uint32_t qh = rd32(s + 2);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 6));
    const __m512i lo = _mm512_cvtepu8_epi32(_mm_and_si128(q, m4));
    const __m512i hi = _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), m4));
    // q - 16 = nibble - 16 + (high bit ? 16 : 0) = nibble - (high bit ? 0 : 16).
    const __m512i vlo = _mm512_mask_sub_epi32(lo, __mmask16(~qh & 0xFFFF), lo, sixteen);
    const __m512i vhi = _mm512_mask_sub_epi32(hi, __mmask16(~(qh >> 16) & 0xFFFF), hi, sixteen);
    _mm512_storeu_ps(y, _mm512_mul_ps(d, _mm512_cvtepi32_ps(vlo)));
    _mm512_storeu_ps(y + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(vhi)));
  }
}

WEIR_TARGET_AVX512 void row_q8_0_avx512(const uint8_t* s, float* __restrict y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, s += 34, y += 32) {
    const __m512 d = half16(s);
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 2));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 18));
    _mm512_storeu_ps(y, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0))));
    _mm512_storeu_ps(y + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1))));
  }
}

WEIR_TARGET_AVX512 void row_q4_K_avx512(const uint8_t* s, float* __restrict y, int64_t nb) {
  const __m128i m4 = _mm_set1_epi8(15);
  for (int64_t b = 0; b < nb; ++b, s += 144, y += 256) {
    const float d = half_f16c(s);
    const float dmin = half_f16c(s + 2);
    const uint8_t* scales = s + 4;
    const uint8_t* qs = s + 16;
    for (int c = 0; c < 4; ++c) {
      uint8_t sc0, mn0, sc1, mn1;
      quant::unpack_scale_min_k4(2 * c, scales, &sc0, &mn0);
      quant::unpack_scale_min_k4(2 * c + 1, scales, &sc1, &mn1);
      const __m512 dl0 = _mm512_set1_ps(d * float(sc0)), ml0 = _mm512_set1_ps(dmin * float(mn0));
      const __m512 dl1 = _mm512_set1_ps(d * float(sc1)), ml1 = _mm512_set1_ps(dmin * float(mn1));
      float* yc = y + 64 * c;
      for (int h = 0; h < 2; ++h) {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 32 * c + 16 * h));
        const __m512 lo = u8x16_to_ps(_mm_and_si128(q, m4));
        const __m512 hi = u8x16_to_ps(_mm_and_si128(_mm_srli_epi16(q, 4), m4));
        _mm512_storeu_ps(yc + 16 * h, _mm512_sub_ps(_mm512_mul_ps(dl0, lo), ml0));
        _mm512_storeu_ps(yc + 32 + 16 * h, _mm512_sub_ps(_mm512_mul_ps(dl1, hi), ml1));
      }
    }
  }
}

WEIR_TARGET_AVX512 void row_q6_K_avx512(const uint8_t* s, float* __restrict y, int64_t nb) {
  const __m512i m4 = _mm512_set1_epi32(15), m2 = _mm512_set1_epi32(3 << 4);
  const __m512i k32 = _mm512_set1_epi32(32);
  for (int64_t b = 0; b < nb; ++b, s += 210, y += 256) {
    const uint8_t* ql = s;
    const uint8_t* qh = s + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(s + 192);
    const float d = half_f16c(s + 208);
    for (int h = 0; h < 2; ++h) {
      float* yh = y + 128 * h;
      for (int part = 0; part < 2; ++part) {
        const int l = 16 * part;
        const __m512i a = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ql + 64 * h + l)));
        const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ql + 64 * h + 32 + l)));
        const __m512i hb = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qh + 32 * h + l)));
        const __m512i q0 = _mm512_or_si512(_mm512_and_si512(a, m4), _mm512_and_si512(_mm512_slli_epi32(hb, 4), m2));
        const __m512i q1 = _mm512_or_si512(_mm512_and_si512(c, m4), _mm512_and_si512(_mm512_slli_epi32(hb, 2), m2));
        const __m512i q2 = _mm512_or_si512(_mm512_srli_epi32(a, 4), _mm512_and_si512(hb, m2));
        const __m512i q3 = _mm512_or_si512(_mm512_srli_epi32(c, 4), _mm512_and_si512(_mm512_srli_epi32(hb, 2), m2));
        const int j = 8 * h + part;
        auto out = [&](float* dst, __m512i q, int sj) {
          const __m512 dl = _mm512_set1_ps(d * float(sc[sj]));
          _mm512_storeu_ps(dst, _mm512_mul_ps(dl, _mm512_cvtepi32_ps(_mm512_sub_epi32(q, k32))));
        };
        out(yh + l, q0, j);
        out(yh + 32 + l, q1, j + 2);
        out(yh + 64 + l, q2, j + 4);
        out(yh + 96 + l, q3, j + 6);
      }
    }
  }
}

WEIR_TARGET_AVX512 void dequant_rows_avx512(DType t, const uint8_t* src, size_t stride, int64_t n_rows,
                                            int64_t k, float* dst, size_t ld) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* s = src + size_t(r) * stride;
    float* y = dst + size_t(r) * ld;
    switch (t) {
      case DType::F32: std::memcpy(y, s, size_t(k) * 4); break;
      case DType::F16: row_f16_avx512(s, y, k); break;
      case DType::BF16: row_bf16_avx512(s, y, k); break;
      case DType::Q4_0: row_q4_0_avx512(s, y, k / 32); break;
      case DType::Q5_0: row_q5_0_avx512(s, y, k / 32); break;
      case DType::Q8_0: row_q8_0_avx512(s, y, k / 32); break;
      case DType::Q4_K: row_q4_K_avx512(s, y, k / 256); break;
      case DType::Q6_K: row_q6_K_avx512(s, y, k / 256); break;
      default: dequantize_row(t, s, y, k); break;
    }
  }
}

// F16 with the F16C unit (exact): the portable loop costs ~10 integer
// operations per 8 values, and attention converts its f16 KV cache with it.
WEIR_TARGET_AVX2 void row_f16_f16c(const uint8_t* s, float* __restrict y, int64_t k) {
  int64_t i = 0;
  for (; i + 8 <= k; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 2 * i))));
  for (; i < k; ++i) y[i] = fp16_to_f32_fast(rd16(s + 2 * i));
}

template <class V>
WEIR_INLINE void dequant_impl(DType t, const uint8_t* src, size_t stride, int64_t n_rows, int64_t k,
                              float* dst, size_t ld) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* s = src + size_t(r) * stride;
    float* y = dst + size_t(r) * ld;
    switch (t) {
      case DType::F32: std::memcpy(y, s, size_t(k) * 4); break;
      case DType::F16:
        if constexpr (simd::kLanes<V> == 8) row_f16_f16c(s, y, k);
        else row_f16(s, y, k);
        break;
      case DType::BF16: row_bf16(s, y, k); break;
      case DType::Q4_0: row_q4_0(s, y, k / 32); break;
      case DType::Q5_0: row_q5_0(s, y, k / 32); break;
      case DType::Q8_0: row_q8_0(s, y, k / 32); break;
      case DType::Q4_K: row_q4_K(s, y, k / 256); break;
      case DType::Q6_K: row_q6_K(s, y, k / 256); break;
      default: dequantize_row(t, s, y, k); break;
    }
  }
}

WEIR_TARGET_AVX2 void dequant_rows_avx2(DType t, const uint8_t* src, size_t stride, int64_t n_rows,
                                        int64_t k, float* dst, size_t ld) {
  dequant_impl<simd::v8sf>(t, src, stride, n_rows, k, dst, ld);
}
void dequant_rows_generic(DType t, const uint8_t* src, size_t stride, int64_t n_rows, int64_t k,
                          float* dst, size_t ld) {
  dequant_impl<simd::v4sf>(t, src, stride, n_rows, k, dst, ld);
}

}  // namespace

bool has_fast_dequantize(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0:
    case DType::Q4_K:
    case DType::Q6_K: return true;
    default: return false;
  }
}

void dequantize_rows(DType t, const void* src, size_t src_stride, int64_t n_rows, int64_t k,
                     float* dst, size_t ld) {
  if (n_rows <= 0 || k <= 0) return;
  if (!has_fast_dequantize(t)) {
    for (int64_t r = 0; r < n_rows; ++r)
      dequantize_row(t, static_cast<const uint8_t*>(src) + size_t(r) * src_stride,
                     dst + size_t(r) * ld, k);
    return;
  }
  const int64_t bs = traits(t).block_size;
  if (k % bs != 0) dequantize_row(t, src, dst, k);  // throws the usual message
  const auto* s = static_cast<const uint8_t*>(src);
  switch (simd::active_isa()) {
    case simd::Isa::Avx512: return dequant_rows_avx512(t, s, src_stride, n_rows, k, dst, ld);
    case simd::Isa::Avx2: return dequant_rows_avx2(t, s, src_stride, n_rows, k, dst, ld);
    default: return dequant_rows_generic(t, s, src_stride, n_rows, k, dst, ld);
  }
}

}  // namespace weir::cpu
