// x86 building blocks of the K-quant dot kernels (qdot_k_avx2.cpp,
// qdot_k_avx512.cpp only; not an interface).
//
// One struct per weight type knows its block layout. Constructed on a block,
// it decodes the scales; chunk(c) yields the 32 quants of elements
// 32c..32c+31 as unsigned bytes (value = q - kOffset) and a vector of 16
// int16 holding the sub-block scale of each element pair; chunk512(C) the
// same for elements 64C..64C+63 (32 int16 scales). mins() adds the block's
// min correction to one activation row's float state, exactly as llama.cpp's
// AVX2 kernel for the type does (the order differs per type; see
// qdot_k_impl.h and qdot_k.cpp's reference twins).
//
// Everything is always-inline with an explicit target so that it compiles
// into the per-level kernels; AVX2 helpers inline into AVX-512 ones too.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/ops_simd.h"  // WEIR_INLINE, WEIR_TARGET_*, <immintrin.h>
#include "backend/cpu/qdot.h"
#include "backend/cpu/qdot_k_impl.h"

#define WEIR_TARGET_AVX512_VNNI \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,fma,f16c,bmi,bmi2")))

namespace weir::cpu::qk::x86 {

constexpr size_t kQ8KBytes = 292;  // BlockQ8_K: float d, int8 qs[256], int16 bsums[16]
constexpr size_t kQ8KQs = 4, kQ8KBsums = 260;

enum class Mins { None, Lanes8, Lanes4, Scalar };

// Float state of one (weight row, activation row) dot.
struct RowState {
  __m256 acc;    // 8 lanes, one FMA per block
  __m128 acc_m;  // q4_K's mins
  float summs;   // q5_K's mins
};

WEIR_TARGET_AVX2 WEIR_INLINE float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);  // exact, like fp16_to_f32
}

// Weight rows stream from memory once per decoded token and the hardware
// prefetcher alone leaves a core far below its bandwidth: fetch the lines a
// distance past the super-block about to be read (rows are contiguous).
// The distance and cache level are set_prefetch's (qdot.h).
extern PrefetchPlan g_prefetch;  // defined in qdot.cpp
template <class T>
WEIR_INLINE void prefetch_ahead(const uint8_t* block) {
  const PrefetchPlan p = g_prefetch;
  if (p.bytes == 0) return;
  const char* at = reinterpret_cast<const char*>(block) + p.bytes;
  switch (p.level) {
    case 0: for (size_t o = 0; o < T::kBytes; o += 64) _mm_prefetch(at + o, _MM_HINT_T0); break;
    case 1: for (size_t o = 0; o < T::kBytes; o += 64) _mm_prefetch(at + o, _MM_HINT_T1); break;
    case 2: for (size_t o = 0; o < T::kBytes; o += 64) _mm_prefetch(at + o, _MM_HINT_T2); break;
    default: for (size_t o = 0; o < T::kBytes; o += 64) _mm_prefetch(at + o, _MM_HINT_NTA); break;
  }
}

WEIR_TARGET_AVX2 WEIR_INLINE __m256i load256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
WEIR_TARGET_AVX2 WEIR_INLINE __m128i load128(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
WEIR_TARGET_AVX512 WEIR_INLINE __m512i load512(const uint8_t* p) {
  return _mm512_loadu_si512(reinterpret_cast<const void*>(p));
}
// [lo, hi] as one 512-bit vector.
WEIR_TARGET_AVX512 WEIR_INLINE __m512i join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
// Shifts of 16-bit lanes by a (compile-time after unrolling) signed amount:
// left for n > 0, right for n < 0. Callers mask the bits they keep, so what
// crosses between the two bytes of a lane never matters.
WEIR_TARGET_AVX2 WEIR_INLINE __m256i shift16(__m256i v, int n) {
  return n > 0 ? _mm256_slli_epi16(v, n) : n < 0 ? _mm256_srli_epi16(v, -n) : v;
}

// 16 int16: 8 copies of int8 scale lo, then 8 of hi (the two 16-element
// sub-blocks of a 32-element chunk).
WEIR_TARGET_AVX2 WEIR_INLINE __m256i pair_scales(__m128i sc8, int lo, int hi) {
  const __m128i ctrl = _mm_set_epi64x(int64_t(0x0101010101010101ull * uint64_t(hi)),
                                      int64_t(0x0101010101010101ull * uint64_t(lo)));
  return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, ctrl));
}
// 32 int16 for elements 64C..64C+63 of a type with 16 int8 sub-block scales:
// lane p is the scale of sub-block 4C + p / 8.
WEIR_TARGET_AVX512 WEIR_INLINE __m512i quad_scales(__m128i sc8, int C) {
  const __m512i s16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(sc8));
  alignas(64) int16_t idx[32];
  for (int p = 0; p < 32; ++p) idx[p] = int16_t(4 * C + p / 8);
  return _mm512_permutexvar_epi16(_mm512_load_si512(idx), s16);
}
// The 8 unsigned byte scales of a q4_K / q5_K block as int16, in both
// 128-bit halves (for per-half byte shuffles).
WEIR_TARGET_AVX2 WEIR_INLINE __m256i scales16x2(const uint8_t sc[8]) {
  uint64_t s8;
  std::memcpy(&s8, sc, 8);
  return _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(s8))));
}
// 16 copies of int16 scale c of scales16x2.
WEIR_TARGET_AVX2 WEIR_INLINE __m256i one_scale(__m256i sc16x2, int c) {
  return _mm256_shuffle_epi8(sc16x2, _mm256_set1_epi16(int16_t(((2 * c + 1) << 8) | (2 * c))));
}
// 32 int16 for elements 64C..64C+63 of a type with 8 scales of 32 elements.
WEIR_TARGET_AVX512 WEIR_INLINE __m512i halves_scales(__m256i sc16x2, int C) {
  return join(one_scale(sc16x2, 2 * C), one_scale(sc16x2, 2 * C + 1));
}
// Bytes of v with bit b set (low half) / bit b + 1 set (high half) of the
// 32 bytes at p, e.g. the high quant bits of two 32-element chunks.
WEIR_TARGET_AVX512 WEIR_INLINE __mmask64 bit_pair_mask(const uint8_t* p, int b) {
  const __m512i v = _mm512_broadcast_i64x4(load256(p));
  const __m512i sel = join(_mm256_set1_epi8(char(1 << b)), _mm256_set1_epi8(char(1 << (b + 1))));
  return _mm512_test_epi8_mask(v, sel);
}

// ---------------------------------------------------------------------------
// q2_K: scales[16] at 0 (low nibble scale, high nibble min), qs[64] at 16,
// d at 80, dmin at 82. Element 128h + 32s + l: (qs[32h + l] >> 2s) & 3.
struct Q2K {
  static constexpr size_t kBytes = 84;
  static constexpr int kOffset = 0;
  static constexpr Mins kMins = Mins::Lanes8;
  const uint8_t* x;
  float xd, xdmin;
  __m128i sc8;
  WEIR_TARGET_AVX2 WEIR_INLINE explicit Q2K(const uint8_t* p)
      : x(p), xd(half_at(p + 80)), xdmin(half_at(p + 82)),
        sc8(_mm_and_si128(load128(p), _mm_set1_epi8(0x0F))) {}
  // Lane k: min(2k) * bsums[2k] + min(2k+1) * bsums[2k+1], into the main
  // accumulator before the block's scaled sum.
  WEIR_TARGET_AVX2 WEIR_INLINE void mins(const uint8_t* y, float yd, RowState& st) const {
    const float dmin = -yd * xdmin;
    const __m128i mn8 = _mm_and_si128(_mm_srli_epi16(load128(x), 4), _mm_set1_epi8(0x0F));
    const __m256i prod = _mm256_madd_epi16(_mm256_cvtepu8_epi16(mn8), load256(y + kQ8KBsums));
    st.acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(prod), st.acc);
  }
  WEIR_TARGET_AVX2 WEIR_INLINE void chunk(int c, __m256i& q, __m256i& s) const {
    const int h = c / 4, sh = c % 4;
    q = _mm256_and_si256(shift16(load256(x + 16 + 32 * h), -2 * sh), _mm256_set1_epi8(3));
    s = pair_scales(sc8, 2 * c, 2 * c + 1);
  }
  WEIR_TARGET_AVX512 WEIR_INLINE void chunk512(int C, __m512i& q, __m512i& s) const {
    const int h = C / 2, t = C % 2;
    const __m256i bits = load256(x + 16 + 32 * h);
    q = _mm512_and_si512(join(shift16(bits, -4 * t), shift16(bits, -4 * t - 2)), _mm512_set1_epi8(3));
    s = quad_scales(sc8, C);
  }
};

// q3_K: hmask[32] at 0, qs[64] at 32, scales[12] at 96, d at 108. Element
// i = 128h + 32s + l: low bits (qs[32h + l] >> 2s) & 3, high bit
// (hmask[l] >> i / 32) & 1; value lo + 4 * hbit - 4.
struct Q3K {
  static constexpr size_t kBytes = 110;
  static constexpr int kOffset = 4;
  static constexpr Mins kMins = Mins::None;
  const uint8_t* x;
  float xd;
  __m128i sc8;
  WEIR_TARGET_AVX2 WEIR_INLINE explicit Q3K(const uint8_t* p) : x(p), xd(half_at(p + 108)) {
    alignas(16) uint8_t sc[16];
    unpack_scales_q3_K_raw(p + 96, sc);
    sc8 = _mm_sub_epi8(_mm_load_si128(reinterpret_cast<const __m128i*>(sc)), _mm_set1_epi8(32));
  }
  WEIR_TARGET_AVX2 WEIR_INLINE void mins(const uint8_t*, float, RowState&) const {}
  WEIR_TARGET_AVX2 WEIR_INLINE void chunk(int c, __m256i& q, __m256i& s) const {
    const int h = c / 4, sh = c % 4;
    const __m256i lo = _mm256_and_si256(shift16(load256(x + 32 + 32 * h), -2 * sh), _mm256_set1_epi8(3));
    const __m256i hb = _mm256_and_si256(shift16(load256(x), 2 - c), _mm256_set1_epi8(4));
    q = _mm256_or_si256(lo, hb);
    s = pair_scales(sc8, 2 * c, 2 * c + 1);
  }
  WEIR_TARGET_AVX512 WEIR_INLINE void chunk512(int C, __m512i& q, __m512i& s) const {
    const int h = C / 2, t = C % 2;
    const __m256i bits = load256(x + 32 + 32 * h);
    const __m512i lo = _mm512_and_si512(join(shift16(bits, -4 * t), shift16(bits, -4 * t - 2)), _mm512_set1_epi8(3));
    q = _mm512_mask_add_epi8(lo, bit_pair_mask(x, 2 * C), lo, _mm512_set1_epi8(4));
    s = quad_scales(sc8, C);
  }
};

// q4_K: d at 0, dmin at 2, scales[12] at 4, qs[128] at 16. Element 64c' +
// 32k + l: (qs[32c' + l] >> 4k) & 15.
struct Q4K {
  static constexpr size_t kBytes = 144;
  static constexpr int kOffset = 0;
  static constexpr Mins kMins = Mins::Lanes4;
  const uint8_t* x;
  float xd, xdmin;
  alignas(8) uint8_t mn[8];
  __m256i sc16;
  WEIR_TARGET_AVX2 WEIR_INLINE explicit Q4K(const uint8_t* p) : x(p), xd(half_at(p)), xdmin(half_at(p + 2)) {
    alignas(8) uint8_t sc[8];
    unpack_scales_mins_k4(p + 4, sc, mn);
    sc16 = scales16x2(sc);
  }
  // 4 lanes, lane l: min(2l) * sum32(2l) + min(2l+1) * sum32(2l+1), with
  // sum32(j) = bsums[2j] + bsums[2j+1].
  WEIR_TARGET_AVX2 WEIR_INLINE void mins(const uint8_t* y, float yd, RowState& st) const {
    const float dmin = -yd * xdmin;
    const __m128i q8s = _mm_hadd_epi16(load128(y + kQ8KBsums), load128(y + kQ8KBsums + 16));
    uint64_t m8;
    std::memcpy(&m8, mn, 8);
    const __m128i prod = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(m8))), q8s);
    st.acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), st.acc_m);
  }
  WEIR_TARGET_AVX2 WEIR_INLINE void chunk(int c, __m256i& q, __m256i& s) const {
    q = _mm256_and_si256(shift16(load256(x + 16 + 32 * (c / 2)), -4 * (c % 2)), _mm256_set1_epi8(0x0F));
    s = one_scale(sc16, c);
  }
  WEIR_TARGET_AVX512 WEIR_INLINE void chunk512(int C, __m512i& q, __m512i& s) const {
    const __m256i bits = load256(x + 16 + 32 * C);
    q = _mm512_and_si512(join(bits, _mm256_srli_epi16(bits, 4)), _mm512_set1_epi8(0x0F));
    s = halves_scales(sc16, C);
  }
};

// q5_K: d at 0, dmin at 2, scales[12] at 4, qh[32] at 16, qs[128] at 48.
// Low 4 bits as in q4_K; bit 4 of element 32j + l is (qh[l] >> j) & 1.
struct Q5K {
  static constexpr size_t kBytes = 176;
  static constexpr int kOffset = 0;
  static constexpr Mins kMins = Mins::Scalar;
  const uint8_t* x;
  float xd, xdmin;
  alignas(8) uint8_t mn[8];
  __m256i sc16;
  WEIR_TARGET_AVX2 WEIR_INLINE explicit Q5K(const uint8_t* p) : x(p), xd(half_at(p)), xdmin(half_at(p + 2)) {
    alignas(8) uint8_t sc[8];
    unpack_scales_mins_k4(p + 4, sc, mn);
    sc16 = scales16x2(sc);
  }
  // One integer per block, sum of min(j) * sum32(j), fused into a scalar.
  WEIR_TARGET_AVX2 WEIR_INLINE void mins(const uint8_t* y, float yd, RowState& st) const {
    const float dmin = -yd * xdmin;
    const __m128i q8s = _mm_hadd_epi16(load128(y + kQ8KBsums), load128(y + kQ8KBsums + 16));
    uint64_t m8;
    std::memcpy(&m8, mn, 8);
    __m128i prod = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(m8))), q8s);
    prod = _mm_add_epi32(prod, _mm_unpackhi_epi64(prod, prod));
    prod = _mm_add_epi32(prod, _mm_shuffle_epi32(prod, 1));
    const float m = float(_mm_cvtsi128_si32(prod));
    st.summs = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(dmin), _mm_set_ss(m), _mm_set_ss(st.summs)));
  }
  WEIR_TARGET_AVX2 WEIR_INLINE void chunk(int c, __m256i& q, __m256i& s) const {
    const __m256i lo = _mm256_and_si256(shift16(load256(x + 48 + 32 * (c / 2)), -4 * (c % 2)), _mm256_set1_epi8(0x0F));
    const __m256i hb = _mm256_and_si256(shift16(load256(x + 16), 4 - c), _mm256_set1_epi8(0x10));
    q = _mm256_or_si256(lo, hb);
    s = one_scale(sc16, c);
  }
  WEIR_TARGET_AVX512 WEIR_INLINE void chunk512(int C, __m512i& q, __m512i& s) const {
    const __m256i bits = load256(x + 48 + 32 * C);
    const __m512i lo = _mm512_and_si512(join(bits, _mm256_srli_epi16(bits, 4)), _mm512_set1_epi8(0x0F));
    q = _mm512_mask_add_epi8(lo, bit_pair_mask(x + 16, 2 * C), lo, _mm512_set1_epi8(0x10));
    s = halves_scales(sc16, C);
  }
};

// q6_K: ql[128] at 0, qh[64] at 128, scales[16] (int8) at 192, d at 208.
// Element 128h + 32s + l: low 4 bits (ql[64h + 32(s % 2) + l] >> 4(s / 2)),
// high 2 bits (qh[32h + l] >> 2s) & 3; value q - 32.
struct Q6K {
  static constexpr size_t kBytes = 210;
  static constexpr int kOffset = 32;
  static constexpr Mins kMins = Mins::None;
  const uint8_t* x;
  float xd;
  __m128i sc8;
  WEIR_TARGET_AVX2 WEIR_INLINE explicit Q6K(const uint8_t* p) : x(p), xd(half_at(p + 208)), sc8(load128(p + 192)) {}
  WEIR_TARGET_AVX2 WEIR_INLINE void mins(const uint8_t*, float, RowState&) const {}
  WEIR_TARGET_AVX2 WEIR_INLINE void chunk(int c, __m256i& q, __m256i& s) const {
    const int h = c / 4, sh = c % 4;
    const __m256i lo = _mm256_and_si256(shift16(load256(x + 64 * h + 32 * (sh % 2)), -4 * (sh / 2)),
                                        _mm256_set1_epi8(0x0F));
    const __m256i hi = _mm256_and_si256(shift16(load256(x + 128 + 32 * h), 4 - 2 * sh), _mm256_set1_epi8(0x30));
    q = _mm256_or_si256(lo, hi);
    s = pair_scales(sc8, 2 * c, 2 * c + 1);
  }
  WEIR_TARGET_AVX512 WEIR_INLINE void chunk512(int C, __m512i& q, __m512i& s) const {
    const int h = C / 2, t = C % 2;
    __m512i lo = load512(x + 64 * h);
    if (t) lo = _mm512_srli_epi16(lo, 4);
    lo = _mm512_and_si512(lo, _mm512_set1_epi8(0x0F));
    const __m256i hb = load256(x + 128 + 32 * h);
    const __m512i hi = _mm512_and_si512(join(shift16(hb, 4 - 4 * t), shift16(hb, 2 - 4 * t)), _mm512_set1_epi8(0x30));
    q = _mm512_or_si512(lo, hi);
    s = quad_scales(sc8, C);
  }
};

// ---------------------------------------------------------------------------
// Tiles (DotTileFn): the activation rows of a tile, at most kTileMax, are
// first repacked super-block by super-block: their float scales d[8], then
// for each 64-element half C (0..3) and row j the 64 quants, so that both
// the 32-element (AVX2) and the 64-element (AVX-512) steps load one
// contiguous vector per row. For the types with an offset (q3_K, q6_K) the
// quants are stored as a + 128 (unsigned): the products then take the
// signed weights q - offset as the second maddubs operand, and the
// weight-only term 128 * sum(q - offset) is subtracted once per super-block
// and row. The integer lanes are exactly the same as dot_rows()'s.
constexpr size_t kPackBytes = 32 + 256 * 8;  // per super-block, kTileMax = 8 rows

struct alignas(64) PackChunk {
  uint8_t b[64];
};

// Offset of the 32 quants of chunk c (elements 32c..32c+31) of row j.
constexpr size_t pack_at(int c, int j) { return 32 + size_t((c / 2) * 8 + j) * 64 + size_t(c % 2) * 32; }

template <class T>
WEIR_TARGET_AVX2 void pack_acts(int64_t nb, const uint8_t* a, size_t astride, int nr, uint8_t* out) {
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* o = out + b * kPackBytes;
    for (int j = 0; j < nr; ++j) {
      const uint8_t* y = a + j * astride + b * kQ8KBytes;
      std::memcpy(o + 4 * j, y, 4);
      for (int c = 0; c < 8; ++c) {
        __m256i v = load256(y + kQ8KQs + 32 * c);
        if constexpr (T::kOffset != 0) v = _mm256_xor_si256(v, _mm256_set1_epi8(char(0x80)));
        _mm256_store_si256(reinterpret_cast<__m256i*>(o + pack_at(c, j)), v);
      }
    }
  }
}

// The packed activations of a tile call, in a per-thread buffer.
template <class T>
WEIR_TARGET_AVX2 const uint8_t* packed_acts(int64_t nb, const void* a, size_t astride, int nr) {
  thread_local std::vector<PackChunk> buf;
  const size_t chunks = size_t(nb) * kPackBytes / sizeof(PackChunk) + 1;
  if (buf.size() < chunks) buf.resize(chunks);
  pack_acts<T>(nb, static_cast<const uint8_t*>(a), astride, nr, buf[0].b);
  return buf[0].b;
}

// The dot of one row's float state, in the type's order.
template <class T>
WEIR_TARGET_AVX2 WEIR_INLINE float finish(const RowState& st) {
  alignas(32) float v[8];
  _mm256_store_ps(v, st.acc);
  const float main = hsum8(v);
  if constexpr (T::kMins == Mins::Lanes4) {
    alignas(16) float m[4];
    _mm_store_ps(m, st.acc_m);
    return main + hsum4(m);
  } else if constexpr (T::kMins == Mins::Scalar) {
    return main + st.summs;
  } else {
    return main;
  }
}

}  // namespace weir::cpu::qk::x86
