// AVX2 kernels for the lookup types (qdot_lookup.h): a group of 32 nibbles
// becomes 32 signed bytes by one table shuffle, and the products with the
// activation bytes are summed in the reference's lanes (maddubs on |w| and
// sign-adjusted a, then madd by the group's scale: int32 lane l holds
// elements 4l..4l+3). The float order is the reference's, so the results
// are equal bit for bit.
#include <cstring>

#include "backend/cpu/ops_simd.h"  // <immintrin.h> with GCC's warnings tamed
#include "backend/cpu/qdot_lookup.h"
#include "core/quant/block_formats.h"

namespace weir::cpu::lookup {
namespace {

#define LK_FN __attribute__((target("avx2,fma,f16c")))
#define LK_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline

LK_INLINE float lk_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

LK_INLINE __m256i lk_table(const int8_t* values) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values)));
}

// The 32 values of 16 bytes of nibbles: low nibbles (elements 0..15) in
// bytes 0..15, high nibbles in bytes 16..31, each looked up in the table.
LK_INLINE __m256i lk_values(const uint8_t* qs, __m256i table) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i idx = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(15));
  return _mm256_shuffle_epi8(table, idx);
}

// scale * (sum of w*a over bytes 4l..4l+3) in int32 lane l. |w| <= 127 and
// activations in [-127, 127] (quantize_act's range) keep maddubs exact.
LK_INLINE __m256i lk_lanes(__m256i w, const int8_t* a, __m256i scale16) {
  const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
  const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(av, w));
  return _mm256_madd_epi16(p, scale16);
}

LK_INLINE float lk_hsum(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));  // l0+l4 ..
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));                                          // (l0+l4)+(l2+l6), ..
  return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
}

// IQ4_NL (18-byte blocks: fp16 d, 16 bytes) or MXFP4 (17: E8M0 e, 16 bytes)
// against Q8_0 (34 bytes: fp16 d, 32 bytes).
template <DType T>
LK_FN float dot_group32(int64_t n, const void* w, const void* a) {
  constexpr bool nl = T == DType::IQ4_NL;
  constexpr size_t wbytes = nl ? sizeof(quant::BlockIQ4_NL) : sizeof(quant::BlockMXFP4);
  const __m256i table = lk_table(nl ? quant::kIQ4NLValues : quant::kMXFP4Values);
  const __m256i ones = _mm256_set1_epi16(1);
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* ap = static_cast<const uint8_t*>(a);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / quant::kQK; ++b, wp += wbytes, ap += sizeof(quant::BlockQ8_0)) {
    const float dw = nl ? lk_half(wp) : quant::e8m0_to_f32_half(wp[0]);
    const __m256i lanes = lk_lanes(lk_values(wp + (nl ? 2 : 1), table), reinterpret_cast<const int8_t*>(ap + 2), ones);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * lk_half(ap)), _mm256_cvtepi32_ps(lanes), acc);
  }
  return lk_hsum(acc);
}

// IQ4_XS (136 bytes: fp16 d, u16 scales_h, 4 bytes scales_l, 128 bytes)
// against Q8_K (292 bytes: float d, 256 bytes, bsums unused).
LK_FN float dot_iq4_xs(int64_t n, const void* w, const void* a) {
  const __m256i table = lk_table(quant::kIQ4NLValues);
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* ap = static_cast<const uint8_t*>(a);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / quant::kQK_K; ++b, wp += sizeof(quant::BlockIQ4_XS), ap += sizeof(quant::BlockQ8_K)) {
    uint16_t sh;
    std::memcpy(&sh, wp + 2, 2);
    float da;
    std::memcpy(&da, ap, 4);
    __m256i lanes = _mm256_setzero_si256();
    for (int j = 0; j < quant::kQK_K / quant::kQK; ++j) {
      const int ls = (((wp[4 + j / 2] >> (4 * (j % 2))) & 15) | (((sh >> (2 * j)) & 3) << 4)) - 32;
      const __m256i v = lk_values(wp + 8 + 16 * j, table);
      lanes = _mm256_add_epi32(lanes, lk_lanes(v, reinterpret_cast<const int8_t*>(ap + 4 + 32 * j),
                                               _mm256_set1_epi16(int16_t(ls))));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(lk_half(wp) * da), _mm256_cvtepi32_ps(lanes), acc);
  }
  return lk_hsum(acc);
}

template <VecDotFn Dot>
void lk_tile(int64_t n, const void* w, size_t wstride, int mr, const void* a, size_t astride, int nr, float* y,
             size_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* abase = static_cast<const uint8_t*>(a);
  for (int j = 0; j < nr; ++j)
    for (int i = 0; i < mr; ++i) y[j * ldy + i] = Dot(n, wb + i * wstride, abase + j * astride);
}

#undef LK_FN
#undef LK_INLINE

}  // namespace

QDotKernels avx2_kernels(DType w) {
  switch (w) {
    case DType::IQ4_NL: return {dot_group32<DType::IQ4_NL>, lk_tile<dot_group32<DType::IQ4_NL>>};
    case DType::MXFP4: return {dot_group32<DType::MXFP4>, lk_tile<dot_group32<DType::MXFP4>>};
    case DType::IQ4_XS: return {dot_iq4_xs, lk_tile<dot_iq4_xs>};
    default: return {};
  }
}

}  // namespace weir::cpu::lookup
