// The q5_0x8 kernels (repack.h): as q4_0x8's (repack_q4_0_simd.cpp), each
// of the 8 nibble vectors of a block given its fifth bits from the block's
// one qh vector (bit v of each byte shifted to bit 4, masked, or-ed in),
// and the integer sums started from -16 * (the block's activation sum).
// 31 * 127 * 2 < 32767: AVX2's maddubs does not saturate.
// AVX-512 VNNI: vpdpbusd, 8 tokens at once; AVX2: maddubs + madd, 4.

#include "backend/cpu/ops_simd.h"  // <immintrin.h> with GCC's warnings tamed
#include "backend/cpu/repack.h"
#include "backend/cpu/repack_act.h"
#include "backend/cpu/repack_layout.h"
#include "backend/cpu/repack_simd.h"
#include "core/quant/block_formats.h"

namespace weir::cpu::repack_simd {

namespace {

using namespace q5_0x8;
using quant::kQK;

using ActBlocks = Q8_0Blocks<16>;
thread_local ActBlocks t_act;

// Bit V of each byte of qh at bit 4, the rest 0. (16-bit shifts: bit 4 of
// each byte comes from its own byte for shifts up to 4 left, 3 right.)
template <int V>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline __m256i fifth_bits(__m256i qh) {
  if constexpr (V < 4) qh = _mm256_slli_epi16(qh, 4 - V);
  if constexpr (V > 4) qh = _mm256_srli_epi16(qh, V - 4);
  return _mm256_and_si256(qh, _mm256_set1_epi8(16));
}

#define REPACK_GROUP(NAME, TARGET, DOT)                                                                     \
  template <int TN>                                                                                                 \
  __attribute__((target(TARGET))) void NAME##_group(int64_t nb, const uint8_t* gp, const ActBlocks& act, int j0,    \
                                                    float* y, size_t ldy, WeightPrefetch pf) {                      \
    __m256 acc[TN];                                                                                                 \
    for (int t = 0; t < TN; ++t) acc[t] = _mm256_setzero_ps();                                                      \
    const __m256i low = _mm256_set1_epi8(15);                                                                       \
    for (int64_t b = 0; b < nb; ++b) {                                                                              \
      const uint8_t* rec = gp + size_t(b) * kRecordBytes;                                                           \
      pf.before<kRecordBytes>(rec);                                                                                 \
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + kD)));              \
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + kQh));                           \
      __m256i w[8];                                                                                                 \
      for (int c = 0; c < 4; ++c) {                                                                                 \
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + kQs + 32 * c));                 \
        w[c] = _mm256_and_si256(v, low);                                                                            \
        w[c + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);                                                  \
      }                                                                                                             \
      w[0] = _mm256_or_si256(w[0], fifth_bits<0>(qh));                                                              \
      w[1] = _mm256_or_si256(w[1], fifth_bits<1>(qh));                                                              \
      w[2] = _mm256_or_si256(w[2], fifth_bits<2>(qh));                                                              \
      w[3] = _mm256_or_si256(w[3], fifth_bits<3>(qh));                                                              \
      w[4] = _mm256_or_si256(w[4], fifth_bits<4>(qh));                                                              \
      w[5] = _mm256_or_si256(w[5], fifth_bits<5>(qh));                                                              \
      w[6] = _mm256_or_si256(w[6], fifth_bits<6>(qh));                                                              \
      w[7] = _mm256_or_si256(w[7], fifth_bits<7>(qh));                                                              \
      /* the tokens' integer sums side by side: independent chains */                                              \
      const int8_t* q[TN];                                                                                          \
      __m256i s[TN];                                                                                                \
      for (int t = 0; t < TN; ++t) {                                                                                \
        const size_t k = size_t(j0 + t) * size_t(nb) + size_t(b);                                                   \
        q[t] = act.qs[k];                                                                                           \
        s[t] = _mm256_set1_epi32(act.corr[k]);                                                                      \
      }                                                                                                             \
      for (int c = 0; c < 8; ++c) {                                                                                 \
        const int off = c < 4 ? 4 * c : 16 + 4 * (c - 4);                                                           \
        for (int t = 0; t < TN; ++t) s[t] = DOT(s[t], w[c], _mm256_set1_epi32(load4(q[t] + off)));                 \
      }                                                                                                             \
      for (int t = 0; t < TN; ++t) {                                                                                \
        const float da = act.scale[size_t(j0 + t) * size_t(nb) + size_t(b)];                                       \
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t]), _mm256_mul_ps(dw, _mm256_set1_ps(da)), acc[t]);          \
      }                                                                                                             \
    }                                                                                                               \
    for (int t = 0; t < TN; ++t) _mm256_storeu_ps(y + size_t(j0 + t) * ldy, acc[t]);                                \
  }

// u8 x s8 in groups of 4 added to int32 lanes.
__attribute__((target("avx2,fma,f16c"), always_inline)) inline __m256i dot_avx2(__m256i s, __m256i u, __m256i a) {
  return _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set1_epi16(1)));
}
__attribute__((target("avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c"), always_inline)) inline __m256i
dot_vnni(__m256i s, __m256i u, __m256i a) {
  return _mm256_dpbusd_epi32(s, u, a);
}

}  // namespace

REPACK_GROUP(q5_0x8_tile_avx2, "avx2,fma,f16c", dot_avx2)
WEIR_REPACK_TILE_LOOP(q5_0x8_tile_avx2, "avx2,fma,f16c", 4, kQK)
REPACK_GROUP(q5_0x8_tile_avx512_vnni, "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c", dot_vnni)
WEIR_REPACK_TILE_LOOP(q5_0x8_tile_avx512_vnni, "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c", 8, kQK)

#undef REPACK_GROUP

}  // namespace weir::cpu::repack_simd
