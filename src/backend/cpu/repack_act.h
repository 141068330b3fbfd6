// The activations' per-block values the repacked kernels (repack_<type>_simd.cpp)
// read, made once a call from the quantized activation rows: for the types
// with 32-element blocks (Q8_0 activations) and for the K-quants with mins
// (Q8_K activations), and the group kernel those K-quants share.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/ops_simd.h"  // <immintrin.h>
#include "core/half.h"
#include "core/quant/block_formats.h"

namespace weir::cpu::repack_simd {

// The sum of a block's 32 quants: SSE2's sum of absolute differences on the
// bytes moved to unsigned (q + 128), less 32 * 128.
inline int32_t block_sum(const int8_t* q) {
  const __m128i flip = _mm_set1_epi8(char(0x80));
  const __m128i lo = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)), flip);
  const __m128i hi = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16)), flip);
  const __m128i s = _mm_add_epi64(_mm_sad_epu8(lo, _mm_setzero_si128()), _mm_sad_epu8(hi, _mm_setzero_si128()));
  return int32_t(_mm_cvtsi128_si64(s) + _mm_cvtsi128_si64(_mm_unpackhi_epi64(s, s))) - 32 * 128;
}

// Per activation row and Q8_0 block: its quants, -OFFSET times their sum
// (where the integer sums start, so that weights stored as q + OFFSET need
// no offset: 8 for Q4_0, 16 for Q5_0, 128 for Q8_0's w + 128) and its scale
// as a float.
template <int OFFSET>
struct Q8_0Blocks {
  std::vector<const int8_t*> qs;
  std::vector<int32_t> corr;
  std::vector<float> scale;
  void fill(const void* a, size_t astride, int nr, int64_t nb) {
    const size_t n = size_t(nr * nb);
    qs.resize(n);
    corr.resize(n);
    scale.resize(n);
    for (int j = 0; j < nr; ++j) {
      const auto* ab = reinterpret_cast<const quant::BlockQ8_0*>(static_cast<const uint8_t*>(a) + size_t(j) * astride);
      for (int64_t b = 0; b < nb; ++b) {
        const size_t k = size_t(j) * size_t(nb) + size_t(b);
        qs[k] = ab[b].qs;
        corr[k] = -OFFSET * block_sum(ab[b].qs);
        uint16_t h;
        std::memcpy(&h, &ab[b].d, 2);
        scale[k] = fp16_to_f32(h);
      }
    }
  }
};

// Per activation row and Q8_K super-block: its quants, scale, and for each
// pair of 32-element sub-blocks (2p, 2p+1) their two sums as int16 halves of
// one int32 (each fits: |sum| <= 32 * 128), for the mins of Q4_K and Q5_K.
struct Q8_KPairBlocks {
  std::vector<const int8_t*> qs;
  std::vector<float> d;
  std::vector<uint32_t> sums;  // 4 a super-block
  void fill(const void* a, size_t astride, int nr, int64_t nb) {
    qs.resize(size_t(nr * nb));
    d.resize(size_t(nr * nb));
    sums.resize(size_t(4 * nr * nb));
    for (int j = 0; j < nr; ++j)
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk =
            static_cast<const uint8_t*>(a) + size_t(j) * astride + size_t(b) * sizeof(quant::BlockQ8_K);
        const size_t k = size_t(j) * size_t(nb) + size_t(b);
        std::memcpy(&d[k], blk + offsetof(quant::BlockQ8_K, d), sizeof(float));
        qs[k] = reinterpret_cast<const int8_t*>(blk + offsetof(quant::BlockQ8_K, qs));
        int16_t bs[16];
        std::memcpy(bs, blk + offsetof(quant::BlockQ8_K, bsums), sizeof(bs));
        for (int p = 0; p < 4; ++p) {
          const int32_t lo = bs[4 * p] + bs[4 * p + 1], hi = bs[4 * p + 2] + bs[4 * p + 3];
          sums[4 * k + size_t(p)] = uint32_t(uint16_t(lo)) | uint32_t(uint16_t(hi)) << 16;
        }
      }
  }
};

}  // namespace weir::cpu::repack_simd

// NAME##_group<TN>, the group kernel of the K-quants with mins (Q4_K, Q5_K;
// the layout's names kRecordBytes, kD, kDmin, kMins where it is expanded):
// per super-block SUBS<TN>(rec, q, isum) adds the scaled sub-block sums, the
// mins go by pairs of sub-blocks (one madd of the 8 rows' (min, min) by the
// activation's (sum, sum)), then two fused multiply-adds a token (d, dmin),
// as the references do. act: a Q8_KPairBlocks.
#define WEIR_REPACK_KMIN_GROUP(NAME, TARGET, SUBS)                                                                       \
  template <int TN>                                                                                                 \
  __attribute__((target(TARGET))) void NAME##_group(int64_t nb, const uint8_t* gp, const ActBlocks& act, int j0,    \
                                                    float* y, size_t ldy, WeightPrefetch pf) {                      \
    __m256 acc[TN];                                                                                                 \
    for (int t = 0; t < TN; ++t) acc[t] = _mm256_setzero_ps();                                                      \
    for (int64_t b = 0; b < nb; ++b) {                                                                              \
      const uint8_t* rec = gp + size_t(b) * kRecordBytes;                                                           \
      pf.before<kRecordBytes>(rec);                                                                                 \
      const int8_t* q[TN];                                                                                          \
      __m256i isum[TN], msum[TN];                                                                                   \
      for (int t = 0; t < TN; ++t) {                                                                                \
        q[t] = act.qs[size_t(j0 + t) * size_t(nb) + size_t(b)];                                                     \
        isum[t] = msum[t] = _mm256_setzero_si256();                                                                 \
      }                                                                                                             \
      SUBS<TN>(rec, q, isum);                                                                                       \
      for (int p = 0; p < 4; ++p) { /* the 8 rows' (min 2p, min 2p+1) as int16 pairs */                            \
        const __m128i lo = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(rec + kMins + 16 * p));                 \
        const __m128i hi = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(rec + kMins + 16 * p + 8));             \
        const __m256i mn = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(lo, hi));                                         \
        for (int t = 0; t < TN; ++t) {                                                                              \
          const uint32_t s = act.sums[4 * (size_t(j0 + t) * size_t(nb) + size_t(b)) + size_t(p)];                   \
          msum[t] = _mm256_add_epi32(msum[t], _mm256_madd_epi16(mn, _mm256_set1_epi32(int32_t(s))));               \
        }                                                                                                           \
      }                                                                                                             \
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + kD)));              \
      const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + kDmin)));           \
      for (int t = 0; t < TN; ++t) {                                                                                \
        const float da = act.d[size_t(j0 + t) * size_t(nb) + size_t(b)];                                            \
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(dw, _mm256_set1_ps(da)), acc[t]);       \
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum[t]), _mm256_mul_ps(dm, _mm256_set1_ps(-da)), acc[t]);      \
      }                                                                                                             \
    }                                                                                                               \
    for (int t = 0; t < TN; ++t) _mm256_storeu_ps(y + size_t(j0 + t) * ldy, acc[t]);                                \
  }
