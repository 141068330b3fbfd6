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

#include "backend/cpu/ops_simd.h"  // <immintrin.h> with GCC's warnings tamed
#include "backend/cpu/repack.h"
#include "backend/cpu/repack_act.h"
#include "backend/cpu/repack_layout.h"
#include "backend/cpu/repack_simd.h"
#include "core/quant/block_formats.h"

namespace weir::cpu::repack_simd {

namespace {

using namespace q4_kx8;
using quant::kQK_K;

using ActBlocks = Q8_KPairBlocks;
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

}  // namespace

WEIR_REPACK_KMIN_GROUP(q4_kx8_tile_avx2, "avx2,fma,f16c", subs_avx2)
WEIR_REPACK_TILE_LOOP(q4_kx8_tile_avx2, "avx2,fma,f16c", 4, kQK_K)
WEIR_REPACK_KMIN_GROUP(q4_kx8_tile_avx512_vnni, "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c", subs_vnni)
WEIR_REPACK_TILE_LOOP(q4_kx8_tile_avx512_vnni, "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c", 8, kQK_K)

#undef Q4K_CHUNK
#undef Q4K_SCALES
#undef Q4K_SUBS_FN

}  // namespace weir::cpu::repack_simd
