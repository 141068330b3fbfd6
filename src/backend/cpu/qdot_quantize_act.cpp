// quantize_act (qdot.h): activations to Q8_0 / Q8_K blocks with exactly the
// values round_q8_0 / round_q8_K (act_quant.cpp) stand for: same amax, same
// scale, same round-half-to-even of x * (1 / scale). Max and the products
// are exact in any order, so the SIMD paths equal the reference bit for bit.
//
// Note: core/quant's quantize_q8_K (the file-format quantizer) maps the
// largest magnitude to -128, not -127 as llama.cpp's activation quantizer
// and round_q8_K do, so it is not used here.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/ops_simd.h"
#include "backend/cpu/qdot.h"
#include "core/error.h"
#include "core/half.h"
#include "core/quant/block_formats.h"

namespace weir::cpu {
namespace {

using quant::BlockQ8_0;
using quant::BlockQ8_K;
using quant::kQK;
using quant::kQK_K;

#define WEIR_TARGET_AVX512_ONLY \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,f16c,bmi,bmi2")))

// Scale of a Q8_0 block from its largest magnitude: (stored d, multiplier).
inline void q8_0_scale(float amax, uint16_t* dh, float* id) {
  *dh = f32_to_fp16(amax / 127.0f);
  *id = amax != 0.0f ? 127.0f / amax : 0.0f;
}

void q8_0_ref(const float* x, void* out, int64_t n) {
  auto* y = static_cast<uint8_t*>(out);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    BlockQ8_0 blk;
    float id;
    q8_0_scale(amax, &blk.d, &id);
    for (int j = 0; j < kQK; ++j) blk.qs[j] = int8_t(std::nearbyint(x[j] * id));
    std::memcpy(y + b * sizeof(BlockQ8_0), &blk, sizeof(blk));
  }
}

// The largest magnitude of a Q8_K block and the signed value of its first
// occurrence (which sets the scale's sign).
struct Q8KMax {
  float amax, max;
};

void q8_K_finish(const Q8KMax& m, float* d, float* iscale) {
  *iscale = m.amax != 0.0f ? -127.0f / m.max : 0.0f;
  *d = m.amax != 0.0f ? 1.0f / *iscale : 0.0f;
}

void q8_K_ref(const float* x, void* out, int64_t n) {
  auto* y = static_cast<uint8_t*>(out);
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    Q8KMax m{0.0f, 0.0f};
    for (int j = 0; j < kQK_K; ++j)
      if (std::fabs(x[j]) > m.amax) m = {std::fabs(x[j]), x[j]};
    BlockQ8_K blk;
    float iscale;
    q8_K_finish(m, &blk.d, &iscale);
    for (int j = 0; j < kQK_K; ++j)
      blk.qs[j] = int8_t(std::min(127.0f, std::nearbyint(iscale * x[j])));
    for (int g = 0; g < kQK_K / 16; ++g) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += blk.qs[16 * g + j];
      blk.bsums[g] = int16_t(s);
    }
    std::memcpy(y + b * sizeof(BlockQ8_K), &blk, sizeof(blk));
  }
}

// ---------------------------------------------------------------------------
// AVX2

WEIR_TARGET_AVX2 inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

WEIR_TARGET_AVX2 inline int hsum8i(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

// 32 int32 (four vectors, elements in order) -> 32 int8 at p; values fit.
WEIR_TARGET_AVX2 inline void pack32(__m256i i0, __m256i i1, __m256i i2, __m256i i3, int8_t* p) {
  const __m256i a = _mm256_packs_epi32(i0, i1);  // per 128-bit half: 0-3 8-11 | 4-7 12-15
  const __m256i b = _mm256_packs_epi32(i2, i3);
  const __m256i c = _mm256_packs_epi16(a, b);  // 0-3 8-11 16-19 24-27 | 4-7 12-15 20-23 28-31
  const __m256i r = _mm256_permutevar8x32_epi32(c, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), r);
}

WEIR_TARGET_AVX2 inline __m256i round_to_i32(__m256 v) {
  return _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

WEIR_TARGET_AVX2 void q8_0_avx2(const float* x, void* out, int64_t n) {
  auto* y = static_cast<uint8_t*>(out);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(x + 8 * k);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[k]));
    }
    BlockQ8_0 blk;
    float id;
    q8_0_scale(hmax8(amax), &blk.d, &id);
    const __m256 m = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; ++k) q[k] = round_to_i32(_mm256_mul_ps(v[k], m));
    pack32(q[0], q[1], q[2], q[3], blk.qs);
    std::memcpy(y + b * sizeof(BlockQ8_0), &blk, sizeof(blk));
  }
}

WEIR_TARGET_AVX2 void q8_K_avx2(const float* x, void* out, int64_t n) {
  auto* y = static_cast<uint8_t*>(out);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    __m256 amaxv = _mm256_setzero_ps();
    for (int k = 0; k < kQK_K; k += 8)
      amaxv = _mm256_max_ps(amaxv, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)));
    Q8KMax m{hmax8(amaxv), 0.0f};
    if (m.amax != 0.0f) {  // the first element of that magnitude
      const __m256 a = _mm256_set1_ps(m.amax);
      for (int k = 0; k < kQK_K; k += 8) {
        const __m256 eq = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)), a, _CMP_EQ_OQ);
        if (const int mask = _mm256_movemask_ps(eq)) {
          m.max = x[k + __builtin_ctz(unsigned(mask))];
          break;
        }
      }
    }
    BlockQ8_K blk;
    float iscale;
    q8_K_finish(m, &blk.d, &iscale);
    const __m256 s = _mm256_set1_ps(iscale);
    const __m256 top = _mm256_set1_ps(127.0f);
    for (int k = 0; k < kQK_K; k += 32) {
      __m256i q[4];
      for (int j = 0; j < 4; ++j) {
        const __m256 r = _mm256_round_ps(_mm256_mul_ps(s, _mm256_loadu_ps(x + k + 8 * j)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q[j] = _mm256_cvtps_epi32(_mm256_min_ps(r, top));
      }
      blk.bsums[k / 16] = int16_t(hsum8i(_mm256_add_epi32(q[0], q[1])));
      blk.bsums[k / 16 + 1] = int16_t(hsum8i(_mm256_add_epi32(q[2], q[3])));
      pack32(q[0], q[1], q[2], q[3], blk.qs + k);
    }
    std::memcpy(y + b * sizeof(BlockQ8_K), &blk, sizeof(blk));
  }
}

// ---------------------------------------------------------------------------
// AVX-512

WEIR_TARGET_AVX512_ONLY inline __m512i round_to_i32_512(__m512 v) {
  return _mm512_cvtps_epi32(_mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

WEIR_TARGET_AVX512_ONLY void q8_0_avx512(const float* x, void* out, int64_t n) {
  auto* y = static_cast<uint8_t*>(out);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    BlockQ8_0 blk;
    float id;
    q8_0_scale(amax, &blk.d, &id);
    const __m512 m = _mm512_set1_ps(id);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(blk.qs),
                     _mm512_cvtsepi32_epi8(round_to_i32_512(_mm512_mul_ps(v0, m))));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(blk.qs + 16),
                     _mm512_cvtsepi32_epi8(round_to_i32_512(_mm512_mul_ps(v1, m))));
    std::memcpy(y + b * sizeof(BlockQ8_0), &blk, sizeof(blk));
  }
}

WEIR_TARGET_AVX512_ONLY void q8_K_avx512(const float* x, void* out, int64_t n) {
  auto* y = static_cast<uint8_t*>(out);
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    __m512 amaxv = _mm512_setzero_ps();
    for (int k = 0; k < kQK_K; k += 16) amaxv = _mm512_max_ps(amaxv, _mm512_abs_ps(_mm512_loadu_ps(x + k)));
    Q8KMax m{_mm512_reduce_max_ps(amaxv), 0.0f};
    if (m.amax != 0.0f) {  // the first element of that magnitude
      const __m512 a = _mm512_set1_ps(m.amax);
      for (int k = 0; k < kQK_K; k += 16) {
        const __mmask16 eq = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + k)), a, _CMP_EQ_OQ);
        if (eq) {
          m.max = x[k + __builtin_ctz(unsigned(eq))];
          break;
        }
      }
    }
    BlockQ8_K blk;
    float iscale;
    q8_K_finish(m, &blk.d, &iscale);
    const __m512 s = _mm512_set1_ps(iscale);
    const __m512i top = _mm512_set1_epi32(127);
    for (int k = 0; k < kQK_K; k += 16) {
      const __m512i q = _mm512_min_epi32(round_to_i32_512(_mm512_mul_ps(s, _mm512_loadu_ps(x + k))), top);
      blk.bsums[k / 16] = int16_t(_mm512_reduce_add_epi32(q));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(blk.qs + k), _mm512_cvtsepi32_epi8(q));
    }
    std::memcpy(y + b * sizeof(BlockQ8_K), &blk, sizeof(blk));
  }
}

}  // namespace

void quantize_act(DType act_type, const float* x, void* out, int64_t n, SimdLevel level) {
  if (int(level) > int(hardware_simd_level())) level = hardware_simd_level();
  const bool avx512 = int(level) >= int(SimdLevel::AVX512);
  const bool avx2 = int(level) >= int(SimdLevel::AVX2);
  switch (act_type) {
    case DType::Q8_0:
      if (n % kQK) break;
      return avx512 ? q8_0_avx512(x, out, n) : avx2 ? q8_0_avx2(x, out, n) : q8_0_ref(x, out, n);
    case DType::Q8_K:
      if (n % kQK_K) break;
      return avx512 ? q8_K_avx512(x, out, n) : avx2 ? q8_K_avx2(x, out, n) : q8_K_ref(x, out, n);
    default: break;
  }
  throw Error(std::string("quantize_act: cannot quantize ") + std::to_string(n) + " activations to " +
              dtype_name(act_type));
}

}  // namespace weir::cpu
