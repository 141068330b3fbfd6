// The q5_Kx8 kernels (repack.h): as q4_Kx8's (repack_q4_k_simd.cpp), each
// chunk's 5-bit quants (0..31) made from its nibbles and the chunk's qh
// vector: bit s of each byte (sub-block s) shifted to bit 4, masked and
// or-ed in. 31 * 128 * 2 < 32767: AVX2's maddubs does not saturate.
// AVX-512 VNNI: vpdpbusd, 8 tokens at once; AVX2: maddubs, then madd by the
// scale in both int16 halves of a lane, 4 tokens at once.
#include <cstring>
#include <vector>

#include "backend/cpu/ops_simd.h"  // <immintrin.h> with GCC's warnings tamed
#include "backend/cpu/repack.h"
#include "backend/cpu/repack_layout.h"
#include "backend/cpu/repack_simd.h"
#include "core/quant/block_formats.h"

namespace weir::cpu::repack_simd {

namespace {

using namespace q5_kx8;
using quant::BlockQ8_K;
using quant::kQK_K;

// Per activation row and super-block: its Q8_K quants, scale, and for each
// pair of sub-blocks (2p, 2p+1) their two 32-element sums as int16 halves
// of one int32 (each fits: |sum| <= 32 * 128); made once a call.
struct ActBlocks {
  std::vector<const int8_t*> qs;
  std::vector<float> d;
  std::vector<uint32_t> sums;  // 4 a super-block
  void fill(const void* a, size_t astride, int nr, int64_t nb) {
    qs.resize(size_t(nr * nb));
    d.resize(size_t(nr * nb));
    sums.resize(size_t(4 * nr * nb));
    for (int j = 0; j < nr; ++j)
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = static_cast<const uint8_t*>(a) + size_t(j) * astride + size_t(b) * sizeof(BlockQ8_K);
        const size_t k = size_t(j) * size_t(nb) + size_t(b);
        std::memcpy(&d[k], blk + offsetof(BlockQ8_K, d), sizeof(float));
        qs[k] = reinterpret_cast<const int8_t*>(blk + offsetof(BlockQ8_K, qs));
        int16_t bs[16];
        std::memcpy(bs, blk + offsetof(BlockQ8_K, bsums), sizeof(bs));
        for (int p = 0; p < 4; ++p) {
          const int32_t lo = bs[4 * p] + bs[4 * p + 1], hi = bs[4 * p + 2] + bs[4 * p + 3];
          sums[4 * k + size_t(p)] = uint32_t(uint16_t(lo)) | uint32_t(uint16_t(hi)) << 16;
        }
      }
  }
};

thread_local ActBlocks t_act;

// Chunk c of sub-block S: 4 quants a row, 0..31. (16-bit shifts: bit 4 of
// each byte comes from its own byte for shifts up to 4 left, 3 right.)
template <int S>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline __m256i chunk5(const uint8_t* rec, int c) {
  __m256i n = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + kQs + 256 * (S / 2) + 32 * c));
  if constexpr (S % 2) n = _mm256_srli_epi16(n, 4);
  __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + kQh + 32 * c));
  if constexpr (S < 4) h = _mm256_slli_epi16(h, 4 - S);
  if constexpr (S > 4) h = _mm256_srli_epi16(h, S - 4);
  return _mm256_or_si256(_mm256_and_si256(n, _mm256_set1_epi8(15)), _mm256_and_si256(h, _mm256_set1_epi8(16)));
}

// The 8 rows' scales of sub-block S, one int32 lane a row.
template <int S>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline __m256i scales(const uint8_t* rec) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(rec + kScales + 8 * S)));
}

// isum[t] += sub-block S's sums times its scales, per ISA.
template <int TN, int S>
__attribute__((target("avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c"), always_inline)) inline void sub_vnni(
    const uint8_t* rec, const int8_t* const* q, __m256i* isum) {
  __m256i s[TN];
  for (int t = 0; t < TN; ++t) s[t] = _mm256_setzero_si256();
  for (int c = 0; c < 8; ++c) {
    const __m256i w = chunk5<S>(rec, c);
    for (int t = 0; t < TN; ++t) s[t] = _mm256_dpbusd_epi32(s[t], w, _mm256_set1_epi32(load4(q[t] + 32 * S + 4 * c)));
  }
  const __m256i sc = scales<S>(rec);
  for (int t = 0; t < TN; ++t) isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(s[t], sc));
}

template <int TN, int S>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void sub_avx2(const uint8_t* rec,
                                                                             const int8_t* const* q, __m256i* isum) {
  const __m256i sc32 = scales<S>(rec);
  const __m256i sc = _mm256_or_si256(sc32, _mm256_slli_epi32(sc32, 16));  // the scale in both halves
  for (int c = 0; c < 8; ++c) {
    const __m256i w = chunk5<S>(rec, c);
    for (int t = 0; t < TN; ++t) {
      const __m256i prod = _mm256_maddubs_epi16(w, _mm256_set1_epi32(load4(q[t] + 32 * S + 4 * c)));
      isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(prod, sc));
    }
  }
}

// The 8 sub-blocks (each one's shifts known).
#define Q5K_SUBS_FN(FN, TARGET, SUB_FN)                                                                    \
  template <int TN>                                                                                        \
  __attribute__((target(TARGET), always_inline)) inline void FN(const uint8_t* rec, const int8_t* const* q, \
                                                                __m256i* isum) {                           \
    SUB_FN<TN, 0>(rec, q, isum);                                                                           \
    SUB_FN<TN, 1>(rec, q, isum);                                                                           \
    SUB_FN<TN, 2>(rec, q, isum);                                                                           \
    SUB_FN<TN, 3>(rec, q, isum);                                                                           \
    SUB_FN<TN, 4>(rec, q, isum);                                                                           \
    SUB_FN<TN, 5>(rec, q, isum);                                                                           \
    SUB_FN<TN, 6>(rec, q, isum);                                                                           \
    SUB_FN<TN, 7>(rec, q, isum);                                                                           \
  }
Q5K_SUBS_FN(subs_vnni, "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c", sub_vnni)
Q5K_SUBS_FN(subs_avx2, "avx2,fma,f16c", sub_avx2)

#define Q5K_GROUP(NAME, TARGET, SUBS)                                                                       \
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

}  // namespace

Q5K_GROUP(q5_kx8_tile_avx2, "avx2,fma,f16c", subs_avx2)
WEIR_REPACK_TILE_LOOP(q5_kx8_tile_avx2, "avx2,fma,f16c", 4, kQK_K)
Q5K_GROUP(q5_kx8_tile_avx512_vnni, "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c", subs_vnni)
WEIR_REPACK_TILE_LOOP(q5_kx8_tile_avx512_vnni, "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c", 8, kQK_K)

#undef Q5K_GROUP
#undef Q5K_SUBS_FN

}  // namespace weir::cpu::repack_simd
