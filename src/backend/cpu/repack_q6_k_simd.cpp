// The q6_Kx8 kernels (repack.h): 8 rows a 256-bit vector, one int32 lane a
// row. Per chunk of 4 elements the 8 rows' 6-bit quants are put together
// from their ql nibbles and qh bit pairs (once a super-block, used by every
// token of the tile) and met by 4 activation bytes broadcast; each
// 16-element sub-block's sum is scaled by the 8 rows' signed scales. The
// quants' offset (q - 32) goes through the Q8_K bsums: -32 * bsum a
// sub-block. One fused multiply-add a super-block and token.
// AVX-512 VNNI: vpdpbusd started from -32 * bsum, then times the scales
// (vpmulld), 8 tokens at once; AVX2: maddubs (63 * 128 * 2 fits int16),
// then madd by the scale in both int16 halves of a lane, the offsets by one
// madd a pair of sub-blocks, 4 tokens at once.
#include <cstring>
#include <vector>

#include "backend/cpu/ops_simd.h"  // <immintrin.h> with GCC's warnings tamed
#include "backend/cpu/repack.h"
#include "backend/cpu/repack_layout.h"
#include "backend/cpu/repack_simd.h"
#include "core/quant/block_formats.h"

namespace weir::cpu::repack_simd {

namespace {

using namespace q6_kx8;
using quant::BlockQ8_K;
using quant::kQK_K;

// Per activation row and super-block: its Q8_K quants and scale, -32 times
// each 16-element sum (the VNNI kernel's starting values), and the sums of
// sub-blocks 2k, 2k+1 as int16 halves of one int32 (the AVX2 kernel's);
// made once a call.
struct ActBlocks {
  std::vector<const int8_t*> qs;
  std::vector<float> d;
  std::vector<int32_t> off;    // 16 a super-block
  std::vector<uint32_t> pairs; // 8 a super-block
  void fill(const void* a, size_t astride, int nr, int64_t nb) {
    const size_t n = size_t(nr * nb);
    qs.resize(n);
    d.resize(n);
    off.resize(16 * n);
    pairs.resize(8 * n);
    for (int j = 0; j < nr; ++j)
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = static_cast<const uint8_t*>(a) + size_t(j) * astride + size_t(b) * sizeof(BlockQ8_K);
        const size_t k = size_t(j) * size_t(nb) + size_t(b);
        std::memcpy(&d[k], blk + offsetof(BlockQ8_K, d), sizeof(float));
        qs[k] = reinterpret_cast<const int8_t*>(blk + offsetof(BlockQ8_K, qs));
        int16_t bs[16];
        std::memcpy(bs, blk + offsetof(BlockQ8_K, bsums), sizeof(bs));
        for (int s = 0; s < 16; ++s) off[16 * k + size_t(s)] = -32 * bs[s];
        for (int p = 0; p < 8; ++p)
          pairs[8 * k + size_t(p)] = uint32_t(uint16_t(bs[2 * p])) | uint32_t(uint16_t(bs[2 * p + 1])) << 16;
      }
  }
};

thread_local ActBlocks t_act;

// The 8 rows' quants of chunk c (elements 128h + 32S + 4c .. +3), 0..63 a
// byte: the low nibbles of ql pair (h, S % 2) for S < 2, the high ones for
// S >= 2, and bits 2S, 2S+1 of the qh chunk moved to bits 4, 5 (16-bit
// shifts: the bits they carry across bytes are masked off).
#define Q6K_QUANTS_FN(FN, TARGET)                                                                            \
  template <int S>                                                                                           \
  __attribute__((target(TARGET), always_inline)) inline __m256i FN(const uint8_t* rec, int h, int c) {       \
    const __m256i ql =                                                                                       \
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + kQl + 256 * (2 * h + S % 2) + 32 * c));    \
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + kQh + 256 * h + 32 * c));   \
    const __m256i lo = _mm256_and_si256(S >= 2 ? _mm256_srli_epi16(ql, 4) : ql, _mm256_set1_epi8(15));      \
    const __m256i hi = S == 0   ? _mm256_slli_epi16(qh, 4)                                                   \
                       : S == 1 ? _mm256_slli_epi16(qh, 2)                                                   \
                       : S == 2 ? qh                                                                          \
                                : _mm256_srli_epi16(qh, 2);                                                   \
    return _mm256_or_si256(lo, _mm256_and_si256(hi, _mm256_set1_epi8(0x30)));                                \
  }

#define VNNI_TARGET "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c"
#define AVX2_TARGET "avx2,fma,f16c"

Q6K_QUANTS_FN(quants_vnni, VNNI_TARGET)
Q6K_QUANTS_FN(quants_avx2, AVX2_TARGET)

// The 8 rows' scales of sub-block sub, 8 bytes.
inline __m128i scales8(const uint8_t* rec, int sub) {
  return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(rec + kScales + 8 * sub));
}

// One token's values for a super-block.
struct TokenBlock {
  const int8_t* q;
  const int32_t* off;
  const uint32_t* pairs;
};

// isum[t] += the sums of sub-blocks 8h + 2S, 8h + 2S + 1 (the 32 elements
// 128h + 32S ..) times their scales, per ISA.
template <int TN, int S>
__attribute__((target(VNNI_TARGET), always_inline)) inline void add_subs_vnni(const uint8_t* rec, int h,
                                                                              const TokenBlock* tb, __m256i* isum) {
  for (int half = 0; half < 2; ++half) {
    const int sub = 8 * h + 2 * S + half;
    __m256i sum[TN];
    for (int t = 0; t < TN; ++t) sum[t] = _mm256_set1_epi32(tb[t].off[sub]);
    for (int c = 4 * half; c < 4 * half + 4; ++c) {
      const __m256i w = quants_vnni<S>(rec, h, c);
      for (int t = 0; t < TN; ++t)
        sum[t] = _mm256_dpbusd_epi32(sum[t], w, _mm256_set1_epi32(load4(tb[t].q + 128 * h + 32 * S + 4 * c)));
    }
    const __m256i sc = _mm256_cvtepi8_epi32(scales8(rec, sub));
    for (int t = 0; t < TN; ++t) isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(sum[t], sc));
  }
}

template <int TN, int S>
__attribute__((target(AVX2_TARGET), always_inline)) inline void add_subs_avx2(const uint8_t* rec, int h,
                                                                              const TokenBlock* tb, __m256i* isum) {
  for (int half = 0; half < 2; ++half) {
    const __m128i b = scales8(rec, 8 * h + 2 * S + half);
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(b, b));  // the scale in both halves
    for (int c = 4 * half; c < 4 * half + 4; ++c) {
      const __m256i w = quants_avx2<S>(rec, h, c);
      for (int t = 0; t < TN; ++t) {
        const __m256i p = _mm256_maddubs_epi16(w, _mm256_set1_epi32(load4(tb[t].q + 128 * h + 32 * S + 4 * c)));
        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p, sc));
      }
    }
  }
}

// isum[t] = the super-block's integer sum of token t.
template <int TN>
__attribute__((target(VNNI_TARGET), always_inline)) inline void isums_vnni(const uint8_t* rec, const TokenBlock* tb,
                                                                           __m256i* isum) {
  for (int t = 0; t < TN; ++t) isum[t] = _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h) {
    add_subs_vnni<TN, 0>(rec, h, tb, isum);
    add_subs_vnni<TN, 1>(rec, h, tb, isum);
    add_subs_vnni<TN, 2>(rec, h, tb, isum);
    add_subs_vnni<TN, 3>(rec, h, tb, isum);
  }
}

template <int TN>
__attribute__((target(AVX2_TARGET), always_inline)) inline void isums_avx2(const uint8_t* rec, const TokenBlock* tb,
                                                                           __m256i* isum) {
  // -32 * sum_sub scale * bsum: the 8 rows' (scale 2p, scale 2p+1) int16
  // pairs times the bsum pairs.
  __m256i off[TN];
  for (int t = 0; t < TN; ++t) off[t] = _mm256_setzero_si256();
  for (int p = 0; p < 8; ++p) {
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(scales8(rec, 2 * p), scales8(rec, 2 * p + 1)));
    for (int t = 0; t < TN; ++t)
      off[t] = _mm256_add_epi32(off[t], _mm256_madd_epi16(sc, _mm256_set1_epi32(int32_t(tb[t].pairs[p]))));
  }
  for (int t = 0; t < TN; ++t) isum[t] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off[t], 5));
  for (int h = 0; h < 2; ++h) {
    add_subs_avx2<TN, 0>(rec, h, tb, isum);
    add_subs_avx2<TN, 1>(rec, h, tb, isum);
    add_subs_avx2<TN, 2>(rec, h, tb, isum);
    add_subs_avx2<TN, 3>(rec, h, tb, isum);
  }
}

#define Q6K_GROUP(NAME, TARGET, ISUMS)                                                                        \
  template <int TN>                                                                                          \
  __attribute__((target(TARGET))) void NAME##_group(int64_t nb, const uint8_t* gp, const ActBlocks& act, int j0, \
                                                    float* y, size_t ldy, WeightPrefetch pf) {               \
    __m256 acc[TN];                                                                                          \
    for (int t = 0; t < TN; ++t) acc[t] = _mm256_setzero_ps();                                               \
    for (int64_t b = 0; b < nb; ++b) {                                                                       \
      const uint8_t* rec = gp + size_t(b) * kRecordBytes;                                                    \
      pf.before<kRecordBytes>(rec);                                                                          \
      TokenBlock tb[TN];                                                                                     \
      for (int t = 0; t < TN; ++t) {                                                                         \
        const size_t k = size_t(j0 + t) * size_t(nb) + size_t(b);                                            \
        tb[t] = {act.qs[k], &act.off[16 * k], &act.pairs[8 * k]};                                            \
      }                                                                                                      \
      __m256i isum[TN];                                                                                      \
      ISUMS<TN>(rec, tb, isum);                                                                              \
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + kD)));       \
      for (int t = 0; t < TN; ++t) {                                                                         \
        const float da = act.d[size_t(j0 + t) * size_t(nb) + size_t(b)];                                     \
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(dw, _mm256_set1_ps(da)), acc[t]); \
      }                                                                                                      \
    }                                                                                                        \
    for (int t = 0; t < TN; ++t) _mm256_storeu_ps(y + size_t(j0 + t) * ldy, acc[t]);                         \
  }

}  // namespace

Q6K_GROUP(q6_kx8_tile_avx2, AVX2_TARGET, isums_avx2)
WEIR_REPACK_TILE_LOOP(q6_kx8_tile_avx2, AVX2_TARGET, 4, kQK_K)
Q6K_GROUP(q6_kx8_tile_avx512_vnni, VNNI_TARGET, isums_vnni)
WEIR_REPACK_TILE_LOOP(q6_kx8_tile_avx512_vnni, VNNI_TARGET, 8, kQK_K)

#undef Q6K_GROUP
#undef Q6K_QUANTS_FN
#undef VNNI_TARGET
#undef AVX2_TARGET

}  // namespace weir::cpu::repack_simd
