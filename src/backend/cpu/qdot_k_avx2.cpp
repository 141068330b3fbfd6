// AVX2 K-quant dot kernels. Per super-block and activation row: 8 chunks of
// 32 quants, each multiplied with the activations by maddubs (u8 x s8 pairs
// to int16; no pair can saturate: |q| <= 63, |a| <= 128, and for the offset
// types 255 * 32 * 2), scaled and widened by madd (int16 pairs to int32)
// into 8 int32 lanes, then one FMA into the row's 8 float lanes. Tiles run
// each weight row past up to 8 packed activation rows (qdot_k_x86.h), so a
// weight chunk is unpacked once per 8 dots.
#include "backend/cpu/qdot_k_x86.h"

namespace weir::cpu::qk {
namespace {

using namespace x86;

// out[j] = dot(weight row w, activation row a[j]) over nb super-blocks.
template <class T, int NR>
WEIR_TARGET_AVX2 WEIR_INLINE void dot_rows(int64_t nb, const uint8_t* w, const uint8_t* const* a, float* out) {
  RowState st[NR];
  for (int j = 0; j < NR; ++j) st[j] = {_mm256_setzero_ps(), _mm_setzero_ps(), 0.0f};
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_ahead<T>(w + b * T::kBytes);
    const T x(w + b * T::kBytes);
    const uint8_t* y[NR];
    float yd[NR];
    __m256i sumi[NR];
    for (int j = 0; j < NR; ++j) {
      y[j] = a[j] + b * kQ8KBytes;
      std::memcpy(&yd[j], y[j], 4);
      x.mins(y[j], yd[j], st[j]);
      sumi[j] = _mm256_setzero_si256();
    }
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      __m256i q, s;
      x.chunk(c, q, s);
      for (int j = 0; j < NR; ++j) {
        const __m256i a8 = load256(y[j] + kQ8KQs + 32 * c);
        __m256i p = _mm256_maddubs_epi16(q, a8);
        if constexpr (T::kOffset != 0) p = _mm256_sub_epi16(p, _mm256_maddubs_epi16(_mm256_set1_epi8(T::kOffset), a8));
        sumi[j] = _mm256_add_epi32(sumi[j], _mm256_madd_epi16(p, s));
      }
    }
    for (int j = 0; j < NR; ++j)
      st[j].acc = _mm256_fmadd_ps(_mm256_set1_ps(yd[j] * x.xd), _mm256_cvtepi32_ps(sumi[j]), st[j].acc);
  }
  for (int j = 0; j < NR; ++j) out[j] = finish<T>(st[j]);
}

template <class T>
WEIR_TARGET_AVX2 float dot(int64_t n, const void* w, const void* a) {
  const auto* ap = static_cast<const uint8_t*>(a);
  float out;
  dot_rows<T, 1>(n / 256, static_cast<const uint8_t*>(w), &ap, &out);
  return out;
}

// One weight row w against NR packed activation rows (pk; the original rows
// a, astride apart, for the mins): y[j * ldy] = dot(w, a row j). Each weight
// chunk is unpacked once for the NR rows; the float states stay in memory,
// touched once per super-block.
template <class T, int NR>
WEIR_TARGET_AVX2 WEIR_INLINE void row_tile(int64_t nb, const uint8_t* w, const uint8_t* a, size_t astride,
                                           const uint8_t* pk, float* y, size_t ldy) {
  RowState st[NR];
  for (int j = 0; j < NR; ++j) st[j] = {_mm256_setzero_ps(), _mm_setzero_ps(), 0.0f};
  for (int64_t b = 0; b < nb; ++b) {
    const T x(w + b * T::kBytes);
    const uint8_t* p = pk + b * kPackBytes;
    __m256i sumi[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) sumi[j] = _mm256_setzero_si256();
    __m256i corr = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      __m256i q, s;
      x.chunk(c, q, s);
      if constexpr (T::kOffset != 0) {
        q = _mm256_sub_epi8(q, _mm256_set1_epi8(T::kOffset));
        corr = _mm256_add_epi32(corr, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(char(0x80)), q), s));
      }
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) {
        const __m256i a8 = _mm256_load_si256(reinterpret_cast<const __m256i*>(p + pack_at(c, j)));
        const __m256i prod = T::kOffset != 0 ? _mm256_maddubs_epi16(a8, q) : _mm256_maddubs_epi16(q, a8);
        sumi[j] = _mm256_add_epi32(sumi[j], _mm256_madd_epi16(prod, s));
        // Opaque to GCC: without it GCC reassociates the sums into trees
        // and spills the 64 products of a super-block to the stack.
        asm("" : "+x"(sumi[j]));
      }
    }
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const float yd = reinterpret_cast<const float*>(p)[j];
      x.mins(a + j * astride + b * kQ8KBytes, yd, st[j]);
      if constexpr (T::kOffset != 0) sumi[j] = _mm256_sub_epi32(sumi[j], corr);
      st[j].acc = _mm256_fmadd_ps(_mm256_set1_ps(yd * x.xd), _mm256_cvtepi32_ps(sumi[j]), st[j].acc);
    }
  }
  for (int j = 0; j < NR; ++j) y[j * ldy] = finish<T>(st[j]);
}

template <class T, int NR>
WEIR_TARGET_AVX2 void tile_nr(int64_t nb, const uint8_t* w, size_t wstride, int mr, const uint8_t* a,
                              size_t astride, const uint8_t* pk, float* y, size_t ldy) {
  for (int i = 0; i < mr; ++i) row_tile<T, NR>(nb, w + i * wstride, a, astride, pk, y + i, ldy);
}

template <class T>
WEIR_TARGET_AVX2 void tile(int64_t n, const void* w, size_t wstride, int mr, const void* a, size_t astride, int nr,
                           float* y, size_t ldy) {
  const int64_t nb = n / 256;
  const uint8_t* pk = packed_acts<T>(nb, a, astride, nr);
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* ap = static_cast<const uint8_t*>(a);
  switch (nr) {
    case 1: return tile_nr<T, 1>(nb, wp, wstride, mr, ap, astride, pk, y, ldy);
    case 2: return tile_nr<T, 2>(nb, wp, wstride, mr, ap, astride, pk, y, ldy);
    case 3: return tile_nr<T, 3>(nb, wp, wstride, mr, ap, astride, pk, y, ldy);
    case 4: return tile_nr<T, 4>(nb, wp, wstride, mr, ap, astride, pk, y, ldy);
    case 5: return tile_nr<T, 5>(nb, wp, wstride, mr, ap, astride, pk, y, ldy);
    case 6: return tile_nr<T, 6>(nb, wp, wstride, mr, ap, astride, pk, y, ldy);
    case 7: return tile_nr<T, 7>(nb, wp, wstride, mr, ap, astride, pk, y, ldy);
    default: return tile_nr<T, 8>(nb, wp, wstride, mr, ap, astride, pk, y, ldy);
  }
}

template <class T>
QDotKernels kernels() {
  return {dot<T>, tile<T>};
}

}  // namespace

QDotKernels avx2_kernels(DType w) {
  switch (w) {
    case DType::Q2_K: return kernels<Q2K>();
    case DType::Q3_K: return kernels<Q3K>();
    case DType::Q4_K: return kernels<Q4K>();
    case DType::Q5_K: return kernels<Q5K>();
    case DType::Q6_K: return kernels<Q6K>();
    default: return {};
  }
}

}  // namespace weir::cpu::qk
