// The q4_Kx8 kernels (repack.h): 8 rows a 256-bit vector, one int32 lane a
// row. Per super-block and sub-block (32 elements): the 8 chunks of 4
// nibble bytes a row, each one vector, against 4 activation bytes
// broadcast; the sub-block's sum times the 8 rows' scales added to the
// super-block's integer sum. The mins: per pair of sub-blocks one multiply-
// add of the 8 rows' (min, min) pairs by the activation's (sum, sum) pair.
// Then per super-block and token two fused multiply-adds (d, dmin), as the
// reference does.
// AVX-512 VNNI: vpdpbusd on 256-bit vectors, a sub-block's sum in int32
// then times its scales (vpmulld), 8 tokens at once; AVX2: maddubs, then
// madd by the scale in both int16 halves of a lane (the scaling comes
// free), 4 tokens at once. The nibbles are unpacked once a super-block and
// used by every token of the tile.
#include <cstring>
#include <vector>

#include "backend/cpu/ops_simd.h"  // <immintrin.h> with GCC's warnings tamed
#include "backend/cpu/repack.h"
#include "backend/cpu/repack_layout.h"
#include "backend/cpu/repack_simd.h"
#include "core/quant/block_formats.h"

namespace weir::cpu::repack_simd {

namespace {

using namespace q4_kx8;
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

// Chunk c of sub-block 2p + HIGH: 4 nibbles a row (low nibbles for even
// sub-blocks, high for odd).
#define Q4K_CHUNK(rec, c)                                                                                   \
  _mm256_and_si256(HIGH ? _mm256_srli_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(            \
                                                (rec) + kQs + 256 * p + 32 * (c))),                          \
                                            4)                                                               \
                        : _mm256_loadu_si256(reinterpret_cast<const __m256i*>((rec) + kQs + 256 * p + 32 * (c))), \
                   _mm256_set1_epi8(15))

// The 8 rows' scales of sub-block 2p + HIGH, one int32 lane a row.
#define Q4K_SCALES(rec) \
  _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>((rec) + kScales + 8 * (2 * p + HIGH))))

// isum[t] += sub-block 2p + HIGH's sums times its scales, per ISA.
template <int TN, int HIGH>
__attribute__((target("avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c"), always_inline)) inline void sub_vnni(
    const uint8_t* rec, int p, const int8_t* const* q, __m256i* isum) {
  __m256i s[TN];
  for (int t = 0; t < TN; ++t) s[t] = _mm256_setzero_si256();
  for (int c = 0; c < 8; ++c) {
    const __m256i w = Q4K_CHUNK(rec, c);
    for (int t = 0; t < TN; ++t) s[t] = _mm256_dpbusd_epi32(s[t], w, _mm256_set1_epi32(load4(q[t] + 64 * p + 32 * HIGH + 4 * c)));
  }
  const __m256i sc = Q4K_SCALES(rec);
  for (int t = 0; t < TN; ++t) isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(s[t], sc));
}

template <int TN, int HIGH>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void sub_avx2(const uint8_t* rec, int p,
                                                                             const int8_t* const* q, __m256i* isum) {
  const __m256i sc32 = Q4K_SCALES(rec);
  const __m256i sc = _mm256_or_si256(sc32, _mm256_slli_epi32(sc32, 16));  // the scale in both halves
  for (int c = 0; c < 8; ++c) {
    const __m256i w = Q4K_CHUNK(rec, c);
    for (int t = 0; t < TN; ++t) {
      const __m256i prod = _mm256_maddubs_epi16(w, _mm256_set1_epi32(load4(q[t] + 64 * p + 32 * HIGH + 4 * c)));
      isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(prod, sc));
    }
  }
}

// The 8 sub-blocks, a pair at a time (the nibbles' half known).
#define Q4K_SUBS_FN(FN, TARGET, SUB_FN)                                                                    \
  template <int TN>                                                                                        \
  __attribute__((target(TARGET), always_inline)) inline void FN(const uint8_t* rec, const int8_t* const* q, \
                                                                __m256i* isum) {                           \
    for (int p = 0; p < 4; ++p) {                                                                          \
      SUB_FN<TN, 0>(rec, p, q, isum);                                                                      \
      SUB_FN<TN, 1>(rec, p, q, isum);                                                                      \
    }                                                                                                      \
  }
Q4K_SUBS_FN(subs_vnni, "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c", sub_vnni)
Q4K_SUBS_FN(subs_avx2, "avx2,fma,f16c", sub_avx2)

#define Q4K_GROUP(NAME, TARGET, SUBS)                                                                       \
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

Q4K_GROUP(q4_kx8_tile_avx2, "avx2,fma,f16c", subs_avx2)
WEIR_REPACK_TILE_LOOP(q4_kx8_tile_avx2, "avx2,fma,f16c", 4, kQK_K)
Q4K_GROUP(q4_kx8_tile_avx512_vnni, "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c", subs_vnni)
WEIR_REPACK_TILE_LOOP(q4_kx8_tile_avx512_vnni, "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c", 8, kQK_K)

#undef Q4K_GROUP
#undef Q4K_CHUNK
#undef Q4K_SCALES
#undef Q4K_SUBS_FN

}  // namespace weir::cpu::repack_simd
