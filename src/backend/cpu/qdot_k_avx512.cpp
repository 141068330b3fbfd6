// AVX-512 (F+BW+DQ+VL) and AVX-512 VNNI K-quant dot kernels. As the AVX2
// ones (qdot_k_avx2.cpp), with 64 quants per step: maddubs to int16 pairs,
// then madd by the scales (VNNI: vpdpwssd, madd and add in one) into 16
// int32 lanes. Lanes k and k + 8 hold the same AVX2 lane k of two 32-element
// chunks, so adding the two halves per block gives exactly llama.cpp's 8
// integer lanes, and the float part (8 lanes, one FMA per block) is the same
// as at every level.
//
// The two levels differ in one instruction but need different targets down
// to the loop that uses it, so the loop is spelled once in a macro and
// instantiated per target.
#include "backend/cpu/qdot_k_x86.h"

namespace weir::cpu::qk {
namespace {

using namespace x86;

WEIR_TARGET_AVX512 WEIR_INLINE __m512i acc_madd(__m512i acc, __m512i p16, __m512i s16) {
  return _mm512_add_epi32(acc, _mm512_madd_epi16(p16, s16));
}
WEIR_TARGET_AVX512_VNNI WEIR_INLINE __m512i acc_dpwssd(__m512i acc, __m512i p16, __m512i s16) {
  return _mm512_dpwssd_epi32(acc, p16, s16);
}

// Products of 64 weight quants (unsigned, value q - offset) with 64 int8
// activations, as int16 pairs. No pair saturates (|q| <= 63, |a| <= 128).
template <int kOffset>
WEIR_TARGET_AVX512 WEIR_INLINE __m512i pair_products(__m512i q, __m512i a8) {
  __m512i p = _mm512_maddubs_epi16(q, a8);
  if constexpr (kOffset != 0) p = _mm512_sub_epi16(p, _mm512_maddubs_epi16(_mm512_set1_epi8(kOffset), a8));
  return p;
}

// out[j] = dot(weight row w, activation row a[j]) over nb super-blocks;
// then the VecDotFn and DotTileFn around it.
#define WEIR_QK_AVX512_KERNELS(SUFFIX, TARGET, ACCUMULATE)                                             \
  template <class T, int NR>                                                                           \
  TARGET WEIR_INLINE void dot_rows_##SUFFIX(int64_t nb, const uint8_t* w, const uint8_t* const* a,     \
                                            float* out) {                                              \
    RowState st[NR];                                                                                   \
    for (int j = 0; j < NR; ++j) st[j] = {_mm256_setzero_ps(), _mm_setzero_ps(), 0.0f};                \
    for (int64_t b = 0; b < nb; ++b) {                                                                 \
      prefetch_ahead<T>(w + b * T::kBytes);                                                            \
      const T x(w + b * T::kBytes);                                                                    \
      const uint8_t* y[NR];                                                                            \
      float yd[NR];                                                                                    \
      __m512i sumi[NR];                                                                                \
      for (int j = 0; j < NR; ++j) {                                                                   \
        y[j] = a[j] + b * kQ8KBytes;                                                                   \
        std::memcpy(&yd[j], y[j], 4);                                                                  \
        x.mins(y[j], yd[j], st[j]);                                                                    \
        sumi[j] = _mm512_setzero_si512();                                                              \
      }                                                                                                \
      _Pragma("GCC unroll 4") for (int c = 0; c < 4; ++c) {                                            \
        __m512i q, s;                                                                                  \
        x.chunk512(c, q, s);                                                                           \
        for (int j = 0; j < NR; ++j)                                                                   \
          sumi[j] = ACCUMULATE(sumi[j], pair_products<T::kOffset>(q, load512(y[j] + kQ8KQs + 64 * c)), s); \
      }                                                                                                \
      for (int j = 0; j < NR; ++j) {                                                                   \
        const __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(sumi[j]),                          \
                                            _mm512_extracti64x4_epi64(sumi[j], 1));                    \
        st[j].acc = _mm256_fmadd_ps(_mm256_set1_ps(yd[j] * x.xd), _mm256_cvtepi32_ps(s8), st[j].acc);  \
      }                                                                                                \
    }                                                                                                  \
    for (int j = 0; j < NR; ++j) out[j] = finish<T>(st[j]);                                            \
  }                                                                                                    \
                                                                                                       \
  template <class T>                                                                                   \
  TARGET float dot_##SUFFIX(int64_t n, const void* w, const void* a) {                                 \
    const auto* ap = static_cast<const uint8_t*>(a);                                                   \
    float out;                                                                                         \
    dot_rows_##SUFFIX<T, 1>(n / 256, static_cast<const uint8_t*>(w), &ap, &out);                       \
    return out;                                                                                        \
  }                                                                                                    \
                                                                                                       \
  /* One weight row against NR packed activation rows, like row_tile (AVX2). */                                 \
  template <class T, int NR>                                                                                   \
  TARGET WEIR_INLINE void row_tile_##SUFFIX(int64_t nb, const uint8_t* w, const uint8_t* a, size_t astride,    \
                                            const uint8_t* pk, float* y, size_t ldy) {                         \
    RowState st[NR];                                                                                           \
    for (int j = 0; j < NR; ++j) st[j] = {_mm256_setzero_ps(), _mm_setzero_ps(), 0.0f};                        \
    for (int64_t b = 0; b < nb; ++b) {                                                                         \
      const T x(w + b * T::kBytes);                                                                            \
      const uint8_t* p = pk + b * kPackBytes;                                                                  \
      __m512i sumi[NR];                                                                                        \
      _Pragma("GCC unroll 8") for (int j = 0; j < NR; ++j) sumi[j] = _mm512_setzero_si512();                   \
      __m512i corr = _mm512_setzero_si512();                                                                   \
      _Pragma("GCC unroll 4") for (int c = 0; c < 4; ++c) {                                                    \
        __m512i q, s;                                                                                          \
        x.chunk512(c, q, s);                                                                                   \
        if constexpr (T::kOffset != 0) {                                                                       \
          q = _mm512_sub_epi8(q, _mm512_set1_epi8(T::kOffset));                                                \
          corr = ACCUMULATE(corr, _mm512_maddubs_epi16(_mm512_set1_epi8(char(0x80)), q), s);                   \
        }                                                                                                      \
        _Pragma("GCC unroll 8") for (int j = 0; j < NR; ++j) {                                                 \
          const __m512i a8 = load512(p + 32 + size_t(c * 8 + j) * 64);                                         \
          const __m512i prod = T::kOffset != 0 ? _mm512_maddubs_epi16(a8, q) : _mm512_maddubs_epi16(q, a8);    \
          sumi[j] = ACCUMULATE(sumi[j], prod, s);                                                              \
          asm("" : "+v"(sumi[j]));                                                                             \
        }                                                                                                      \
      }                                                                                                        \
      _Pragma("GCC unroll 8") for (int j = 0; j < NR; ++j) {                                                   \
        const float yd = reinterpret_cast<const float*>(p)[j];                                                 \
        x.mins(a + j * astride + b * kQ8KBytes, yd, st[j]);                                                    \
        if constexpr (T::kOffset != 0) sumi[j] = _mm512_sub_epi32(sumi[j], corr);                              \
        const __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(sumi[j]), _mm512_extracti64x4_epi64(sumi[j], 1));\
        st[j].acc = _mm256_fmadd_ps(_mm256_set1_ps(yd * x.xd), _mm256_cvtepi32_ps(s8), st[j].acc);             \
      }                                                                                                        \
    }                                                                                                          \
    for (int j = 0; j < NR; ++j) y[j * ldy] = finish<T>(st[j]);                                                \
  }                                                                                                            \
                                                                                                               \
  template <class T, int NR>                                                                                   \
  TARGET void tile_nr_##SUFFIX(int64_t nb, const uint8_t* w, size_t wstride, int mr, const uint8_t* a,         \
                               size_t astride, const uint8_t* pk, float* y, size_t ldy) {                      \
    for (int i = 0; i < mr; ++i) row_tile_##SUFFIX<T, NR>(nb, w + i * wstride, a, astride, pk, y + i, ldy);    \
  }                                                                                                            \
                                                                                                               \
  template <class T>                                                                                           \
  TARGET void tile_##SUFFIX(int64_t n, const void* w, size_t wstride, int mr, const void* a, size_t astride,   \
                            int nr, float* y, size_t ldy) {                                                    \
    const int64_t nb = n / 256;                                                                                \
    const uint8_t* pk = packed_acts<T>(nb, a, astride, nr);                                                    \
    const auto* wp = static_cast<const uint8_t*>(w);                                                           \
    const auto* ap = static_cast<const uint8_t*>(a);                                                           \
    switch (nr) {                                                                                              \
      case 1: return tile_nr_##SUFFIX<T, 1>(nb, wp, wstride, mr, ap, astride, pk, y, ldy);                     \
      case 2: return tile_nr_##SUFFIX<T, 2>(nb, wp, wstride, mr, ap, astride, pk, y, ldy);                     \
      case 3: return tile_nr_##SUFFIX<T, 3>(nb, wp, wstride, mr, ap, astride, pk, y, ldy);                     \
      case 4: return tile_nr_##SUFFIX<T, 4>(nb, wp, wstride, mr, ap, astride, pk, y, ldy);                     \
      case 5: return tile_nr_##SUFFIX<T, 5>(nb, wp, wstride, mr, ap, astride, pk, y, ldy);                     \
      case 6: return tile_nr_##SUFFIX<T, 6>(nb, wp, wstride, mr, ap, astride, pk, y, ldy);                     \
      case 7: return tile_nr_##SUFFIX<T, 7>(nb, wp, wstride, mr, ap, astride, pk, y, ldy);                     \
      default: return tile_nr_##SUFFIX<T, 8>(nb, wp, wstride, mr, ap, astride, pk, y, ldy);                    \
    }                                                                                                          \
  }                                                                                                            \
                                                                                                               \
  QDotKernels kernels_##SUFFIX(DType wt) {                                                             \
    switch (wt) {                                                                                      \
      case DType::Q2_K: return {dot_##SUFFIX<Q2K>, tile_##SUFFIX<Q2K>};                                \
      case DType::Q3_K: return {dot_##SUFFIX<Q3K>, tile_##SUFFIX<Q3K>};                                \
      case DType::Q4_K: return {dot_##SUFFIX<Q4K>, tile_##SUFFIX<Q4K>};                                \
      case DType::Q5_K: return {dot_##SUFFIX<Q5K>, tile_##SUFFIX<Q5K>};                                \
      case DType::Q6_K: return {dot_##SUFFIX<Q6K>, tile_##SUFFIX<Q6K>};                                \
      default: return {};                                                                              \
    }                                                                                                  \
  }

WEIR_QK_AVX512_KERNELS(avx512, WEIR_TARGET_AVX512, acc_madd)
WEIR_QK_AVX512_KERNELS(vnni, WEIR_TARGET_AVX512_VNNI, acc_dpwssd)

#undef WEIR_QK_AVX512_KERNELS

}  // namespace

QDotKernels avx512_kernels(DType w) { return kernels_avx512(w); }
QDotKernels avx512_vnni_kernels(DType w) { return kernels_vnni(w); }

}  // namespace weir::cpu::qk
