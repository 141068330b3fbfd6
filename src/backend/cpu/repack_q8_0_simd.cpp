// The q8_0x8 kernels (repack.h): 8 rows a 256-bit vector, one int32 lane a
// row; per 32-element block 8 chunks of 4 signed quants a row against 4
// activation bytes broadcast, one conversion and one fused multiply-add by
// d_w * d_a a block and token. Both operands are signed:
// AVX-512 VNNI: the weights moved to unsigned (w + 128, one xor a chunk,
// once a block for every token), vpdpbusd started from -128 * (the block's
// activation sum); 8 tokens at once.
// AVX2: maddubs of |w| (once a block) by the activations with w's sign
// (psignb a token and chunk): |w| <= 128 and |a| <= 127 (quantize_act's
// Q8_0), so a pair's sum (<= 32512) never saturates; 4 tokens at once.

#include "backend/cpu/ops_simd.h"  // <immintrin.h> with GCC's warnings tamed
#include "backend/cpu/repack.h"
#include "backend/cpu/repack_act.h"
#include "backend/cpu/repack_layout.h"
#include "backend/cpu/repack_simd.h"
#include "core/quant/block_formats.h"

namespace weir::cpu::repack_simd {

namespace {

using namespace q8_0x8;
using quant::kQK;

using ActBlocks = Q8_0Blocks<128>;
thread_local ActBlocks t_act;

#define VNNI_TARGET "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c"
#define AVX2_TARGET "avx2,fma,f16c"

// s[t] = the block's integer sums of the TN tokens, per ISA.
template <int TN>
__attribute__((target(VNNI_TARGET), always_inline)) inline void isums_vnni(const uint8_t* rec, const int8_t* const* q,
                                                                           const int32_t* corr, __m256i* s) {
  for (int t = 0; t < TN; ++t) s[t] = _mm256_set1_epi32(corr[t]);
  for (int c = 0; c < 8; ++c) {
    const __m256i w = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + kQs + 32 * c)),
                                       _mm256_set1_epi8(char(0x80)));  // w + 128
    for (int t = 0; t < TN; ++t) s[t] = _mm256_dpbusd_epi32(s[t], w, _mm256_set1_epi32(load4(q[t] + 4 * c)));
  }
}

template <int TN>
__attribute__((target(AVX2_TARGET), always_inline)) inline void isums_avx2(const uint8_t* rec, const int8_t* const* q,
                                                                           const int32_t*, __m256i* s) {
  for (int t = 0; t < TN; ++t) s[t] = _mm256_setzero_si256();
  for (int c = 0; c < 8; ++c) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + kQs + 32 * c));
    const __m256i aw = _mm256_abs_epi8(w);
    for (int t = 0; t < TN; ++t) {
      const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(_mm256_set1_epi32(load4(q[t] + 4 * c)), w));
      s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
    }
  }
}

#define Q8_0_GROUP(NAME, TARGET, ISUMS)                                                                       \
  template <int TN>                                                                                          \
  __attribute__((target(TARGET))) void NAME##_group(int64_t nb, const uint8_t* gp, const ActBlocks& act, int j0, \
                                                    float* y, size_t ldy, WeightPrefetch pf) {               \
    __m256 acc[TN];                                                                                          \
    for (int t = 0; t < TN; ++t) acc[t] = _mm256_setzero_ps();                                               \
    for (int64_t b = 0; b < nb; ++b) {                                                                       \
      const uint8_t* rec = gp + size_t(b) * kRecordBytes;                                                    \
      pf.before<kRecordBytes>(rec);                                                                          \
      const int8_t* q[TN];                                                                                   \
      int32_t corr[TN];                                                                                      \
      for (int t = 0; t < TN; ++t) {                                                                         \
        const size_t k = size_t(j0 + t) * size_t(nb) + size_t(b);                                            \
        q[t] = act.qs[k];                                                                                    \
        corr[t] = act.corr[k];                                                                               \
      }                                                                                                      \
      __m256i s[TN];                                                                                         \
      ISUMS<TN>(rec, q, corr, s);                                                                            \
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + kD)));       \
      for (int t = 0; t < TN; ++t) {                                                                         \
        const float da = act.scale[size_t(j0 + t) * size_t(nb) + size_t(b)];                                 \
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t]), _mm256_mul_ps(dw, _mm256_set1_ps(da)), acc[t]);    \
      }                                                                                                      \
    }                                                                                                        \
    for (int t = 0; t < TN; ++t) _mm256_storeu_ps(y + size_t(j0 + t) * ldy, acc[t]);                         \
  }

}  // namespace

Q8_0_GROUP(q8_0x8_tile_avx2, AVX2_TARGET, isums_avx2)
WEIR_REPACK_TILE_LOOP(q8_0x8_tile_avx2, AVX2_TARGET, 4, kQK)
Q8_0_GROUP(q8_0x8_tile_avx512_vnni, VNNI_TARGET, isums_vnni)
WEIR_REPACK_TILE_LOOP(q8_0x8_tile_avx512_vnni, VNNI_TARGET, 8, kQK)

#undef Q8_0_GROUP
#undef VNNI_TARGET
#undef AVX2_TARGET

}  // namespace weir::cpu::repack_simd
