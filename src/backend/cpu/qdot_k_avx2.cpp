// AVX2 K-quant dot kernels. Per super-block and activation row: 8 chunks of
// 32 quants, each multiplied with the activations by maddubs (u8 x s8 pairs
// to int16; no pair can saturate: |q| <= 63, |a| <= 128), scaled and widened
// by madd (int16 pairs to int32) into 8 int32 lanes, then one FMA into the
// row's 8 float lanes. A weight chunk is unpacked once and used for all NR
// activation rows of a tile.
#include <algorithm>

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

template <class T>
WEIR_TARGET_AVX2 void tile(int64_t n, const void* w, size_t wstride, int mr, const void* a, size_t astride, int nr,
                           float* y, size_t ldy) {
  const uint8_t* ap[kTileMax];
  for (int j = 0; j < nr; ++j) ap[j] = static_cast<const uint8_t*>(a) + j * astride;
  for (int i = 0; i < mr; ++i) {
    const uint8_t* wi = static_cast<const uint8_t*>(w) + i * wstride;
    float out[kTileMax];
    for (int j0 = 0; j0 < nr; j0 += 4) {
      switch (std::min(4, nr - j0)) {
        case 1: dot_rows<T, 1>(n / 256, wi, ap + j0, out + j0); break;
        case 2: dot_rows<T, 2>(n / 256, wi, ap + j0, out + j0); break;
        case 3: dot_rows<T, 3>(n / 256, wi, ap + j0, out + j0); break;
        default: dot_rows<T, 4>(n / 256, wi, ap + j0, out + j0); break;
      }
    }
    for (int j = 0; j < nr; ++j) y[j * ldy + i] = out[j];
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
