// The q5_Kx8 kernels (repack.h): as q4_Kx8's (repack_q4_k_simd.cpp), each
// chunk's 5-bit quants (0..31) made from its nibbles and the chunk's qh
// vector: bit s of each byte (sub-block s) shifted to bit 4, masked and
// or-ed in. 31 * 128 * 2 < 32767: AVX2's maddubs does not saturate.
// AVX-512 VNNI: vpdpbusd, 8 tokens at once; AVX2: maddubs, then madd by the
// scale in both int16 halves of a lane, 4 tokens at once.

#include "backend/cpu/ops_simd.h"  // <immintrin.h> with GCC's warnings tamed
#include "backend/cpu/repack.h"
#include "backend/cpu/repack_act.h"
#include "backend/cpu/repack_layout.h"
#include "backend/cpu/repack_simd.h"
#include "core/quant/block_formats.h"

namespace weir::cpu::repack_simd {

namespace {

using namespace q5_kx8;
using quant::kQK_K;

using ActBlocks = Q8_KPairBlocks;
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

}  // namespace

WEIR_REPACK_KMIN_GROUP(q5_kx8_tile_avx2, "avx2,fma,f16c", subs_avx2)
WEIR_REPACK_TILE_LOOP(q5_kx8_tile_avx2, "avx2,fma,f16c", 4, kQK_K)
WEIR_REPACK_KMIN_GROUP(q5_kx8_tile_avx512_vnni, "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c", subs_vnni)
WEIR_REPACK_TILE_LOOP(q5_kx8_tile_avx512_vnni, "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c", 8, kQK_K)

#undef Q5K_SUBS_FN

}  // namespace weir::cpu::repack_simd
