// Row-wise element kernels: mul, add, scale, softcap, gelu_mul, rms_norm. Threads
// share the rows of dst in chunks (for_each_row_chunk); every source is addressed through its own strides,
// so views work. Numerics follow llama.cpp's CPU code:
//  - rms_norm: sum of float squares accumulated in double, mean rounded to
//    float, scale = 1/sqrtf(mean + eps), y = x * scale.
//  - gelu_mul: ggml's geglu with GGML_GELU_FP16 (on by default in ggml-cpu):
//    x is rounded to fp16, looked up in a 64K-entry table of
//    fp16(gelu_tanh(x)), widened and multiplied by b; x <= -10 gives 0 and
//    x >= 10 gives x * b. dst.iparams[0] = 1 or OpContext::exact selects the exact float formula
//    0.5f*x*(1 + tanhf(sqrt(2/pi)*x*(1 + 0.044715f*x*x))) * b instead.
//  - gelu: ggml_vec_gelu_f32, the same table (or formula) without the b.
//  - layer_norm: ggml_norm: the row's sum in double, mean rounded to float,
//    y = x - mean, the sum of float squares y*y in double, variance rounded
//    to float, y *= 1/sqrtf(variance + eps).

// The fp16 rounding below relies on separately rounded products and sums.
#pragma GCC optimize("fp-contract=off")

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ops_common.h"
#include "backend/cpu/ops_simd.h"
#include "core/error.h"
#include "core/half.h"

namespace weir::cpu {
namespace {

using namespace simd;

const float* src_row(const Tensor& t, int64_t r) { return flat_row<const float>(t, r); }
float* dst_row(const Tensor& t, int64_t r) { return flat_row<float>(t, r); }

// Empty string when t is usable as an F32 operand of dst.
std::string check_f32(const Tensor& dst, const Tensor* t, const char* op) {
  if (!t) return std::string(op) + ": " + dst.name + ": missing operand";
  if (t->dtype != DType::F32 || t->nb[0] != sizeof(float))
    return std::string(op) + ": " + dst.name + ": operand " + t->name +
           " must be F32 with contiguous rows";
  return {};
}
std::string check_f32(const Tensor& dst, const Tensor* a, const Tensor* b, const char* op) {
  std::string e = check_f32(dst, &dst, op);
  if (e.empty()) e = check_f32(dst, a, op);
  if (e.empty() && b) e = check_f32(dst, b, op);
  return e;
}

// --- binary ---------------------------------------------------------------

enum class BinOp { Mul, Add };

template <class V>
WEIR_INLINE void binary_rows_impl(BinOp op, float* const* y, const float* const* a,
                                  const float* const* b, int64_t rows, int64_t k) {
  for (int64_t r = 0; r < rows; ++r) {
    float* __restrict yr = y[r];
    const float* ar = a[r];
    const float* br = b[r];
    if (op == BinOp::Mul)
      for (int64_t i = 0; i < k; ++i) yr[i] = ar[i] * br[i];
    else
      for (int64_t i = 0; i < k; ++i) yr[i] = ar[i] + br[i];
  }
}
WEIR_DISPATCH(binary_rows,
              (BinOp op, float* const* y, const float* const* a, const float* const* b, int64_t rows,
               int64_t k),
              (op, y, a, b, rows, k))

void binary(const Tensor& dst, const OpContext& c, BinOp op, const char* name) {
  const Tensor* a = dst.src[0];
  const Tensor* b = dst.src[1];
  if (std::string e = check_f32(dst, a, b ? b : &dst, name); !e.empty() || !b)
    return fail(c, e.empty() ? std::string(name) + ": " + dst.name + ": missing operand" : e);
  const int64_t k = dst.ne[0], rows = dst.n_rows();
  if (a->ne[0] != k || b->ne[0] != k || a->n_rows() != rows ||
      (b->n_rows() != 1 && b->n_rows() != rows))
    return fail(c, std::string(name) + ": " + dst.name + ": shapes " + shape_str(*a) + " and " +
                       shape_str(*b) + " do not match");
  for_each_row_chunk(c, rows, k, [&](int64_t r0, int64_t r1) {
    constexpr int64_t kBatch = 64;
    float* y[kBatch];
    const float* ap[kBatch];
    const float* bp[kBatch];
    for (int64_t r = r0; r < r1; r += kBatch) {
      const int64_t n = std::min(kBatch, r1 - r);
      for (int64_t i = 0; i < n; ++i) {
        y[i] = dst_row(dst, r + i);
        ap[i] = src_row(*a, r + i);
        bp[i] = b->n_rows() == 1 ? static_cast<const float*>(b->data) : src_row(*b, r + i);
      }
      binary_rows(op, y, ap, bp, n, k);
    }
  });
}

// --- scale ------------------------------------------------------------------

template <class V>
WEIR_INLINE void scale_row_impl(float* __restrict y, const float* x, float s, int64_t k) {
  for (int64_t i = 0; i < k; ++i) y[i] = x[i] * s;
}
WEIR_DISPATCH(scale_row, (float* y, const float* x, float s, int64_t k), (y, x, s, k))

// --- rms_norm -----------------------------------------------------------------

typedef double v8df __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));

// The eight double lanes of rms_norm_row_impl below with AVX2 intrinsics (GCC
// 12 moves the generic v8df through the stack and integer registers every
// iteration); returns how many x were summed.
WEIR_TARGET_AVX2 int64_t sum_squares_avx2(const float* x, int64_t k, v8df* acc) {
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 sq = _mm256_mul_ps(v, v);
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
  }
  alignas(32) double l[8];
  _mm256_store_pd(l, lo);
  _mm256_store_pd(l + 4, hi);
  for (int j = 0; j < 8; ++j) (*acc)[j] = l[j];
  return i;
}

template <class V>
WEIR_INLINE void rms_norm_row_impl(float* __restrict y, const float* x, float eps, int64_t k) {
  // Eight double lanes; each product x*x is rounded to float first, as in
  // ggml (sum += (ggml_float)(x[i]*x[i])).
  v8df acc = {};
  int64_t i = 0;
  if constexpr (kLanes<V> == 8) {
    i = sum_squares_avx2(x, k, &acc);
  } else {
    for (; i + 8 <= k; i += 8) {
      v8f v;
      std::memcpy(&v, x + i, sizeof(v));
      acc += __builtin_convertvector(v * v, v8df);
    }
  }
  double sum = 0.0;
  for (; i < k; ++i) sum += double(x[i] * x[i]);
  sum += ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  const float mean = float(sum / double(k));
  const float scale = 1.0f / sqrtf(mean + eps);
  for (int64_t j = 0; j < k; ++j) y[j] = x[j] * scale;
}
WEIR_DISPATCH(rms_norm_row, (float* y, const float* x, float eps, int64_t k), (y, x, eps, k))

// --- gelu_mul ---------------------------------------------------------------

float gelu_tanh(float x) {
  const float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  const float kCoefA = 0.044715f;
  return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * x * (1.0f + kCoefA * x * x)));
}

// fp16(gelu(h)) for every half h, plus one padding entry.
const uint16_t* gelu_table() {
  static const std::vector<uint16_t> table = [] {
    std::vector<uint16_t> t(65537);
    for (uint32_t h = 0; h < 65536; ++h) t[h] = f32_to_fp16(gelu_tanh(fp16_to_f32(uint16_t(h))));
    t[65536] = 0;
    return t;
  }();
  return table.data();
}

// float -> half, round to nearest even, branch-free (vectorizes). Agrees
// with core/half.h f32_to_fp16 on every non-NaN input (tests check).
WEIR_INLINE uint16_t f32_to_fp16_fast(float f) {
  auto as_f = [](uint32_t u) { float r; std::memcpy(&r, &u, 4); return r; };
  auto as_u = [](float r) { uint32_t u; std::memcpy(&u, &r, 4); return u; };
  float base = (std::fabs(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t w = as_u(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = as_f((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = as_u(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return uint16_t((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

// The same with the F16C conversions (exact, round to nearest even like
// f32_to_fp16_fast; NaNs may come out with other payloads) and a 32-bit
// gather whose upper half (the next entry, or the padding one) is dropped.
WEIR_TARGET_AVX2 int64_t gelu_mul_f16c(float* __restrict y, const float* a, const float* b, int64_t k,
                                       const uint16_t* table) {
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    const __m256 x = _mm256_loadu_ps(a + i);
    const __m256i idx = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    const __m256i e = _mm256_and_si256(_mm256_i32gather_epi32(reinterpret_cast<const int*>(table), idx, 2),
                                       _mm256_set1_epi32(0xFFFF));
    const __m256 g = _mm256_cvtph_ps(_mm_packus_epi32(_mm256_castsi256_si128(e), _mm256_extracti128_si256(e, 1)));
    const __m256 v = _mm256_mul_ps(_mm256_blendv_ps(g, x, _mm256_cmp_ps(x, _mm256_set1_ps(10.0f), _CMP_GE_OQ)),
                                   _mm256_loadu_ps(b + i));
    _mm256_storeu_ps(y + i, _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(-10.0f), _CMP_LE_OQ), v));
  }
  return i;
}

template <class V>
WEIR_INLINE void gelu_mul_row_impl(float* __restrict y, const float* a, const float* b, int64_t k,
                                   const uint16_t* table) {
  int64_t i0 = 0;
  if constexpr (kLanes<V> == 8) i0 = gelu_mul_f16c(y, a, b, k, table);
  for (int64_t i = i0; i < k; ++i) {
    const float x = a[i];
    const float g = fp16_to_f32_fast(table[f32_to_fp16_fast(x)]);
    const float v = (x >= 10.0f ? x : g) * b[i];
    y[i] = x <= -10.0f ? 0.0f : v;
  }
}
WEIR_DISPATCH(gelu_mul_row, (float* y, const float* a, const float* b, int64_t k, const uint16_t* table),
              (y, a, b, k, table))

template <class V>
WEIR_INLINE void layer_norm_row_impl(float* __restrict y, const float* x, float eps, int64_t k) {
  double sum = 0.0;
  for (int64_t i = 0; i < k; ++i) sum += double(x[i]);
  const float mean = float(sum / double(k));
  double sum2 = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    const float v = x[i] - mean;
    y[i] = v;
    sum2 += double(v * v);
  }
  const float variance = float(sum2 / double(k));
  const float scale = 1.0f / sqrtf(variance + eps);
  for (int64_t i = 0; i < k; ++i) y[i] *= scale;
}
WEIR_DISPATCH(layer_norm_row, (float* y, const float* x, float eps, int64_t k), (y, x, eps, k))

}  // namespace

void op_mul(const Tensor& dst, const OpContext& c) { binary(dst, c, BinOp::Mul, "mul"); }
void op_add(const Tensor& dst, const OpContext& c) { binary(dst, c, BinOp::Add, "add"); }

void op_scale(const Tensor& dst, const OpContext& c) {
  const Tensor* a = dst.src[0];
  if (std::string e = check_f32(dst, a, nullptr, "scale"); !e.empty()) return fail(c, e);
  if (a->ne[0] != dst.ne[0] || a->n_rows() != dst.n_rows())
    return fail(c, "scale: " + dst.name + ": shape of " + shape_str(*a) + " does not match");
  const int64_t k = dst.ne[0];
  for_each_row_chunk(c, dst.n_rows(), k, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) scale_row(dst_row(dst, r), src_row(*a, r), dst.fparams[0], k);
  });
}

// Plain float: y = cap * tanhf(x / cap) (llama.cpp scales by 1/cap, tanh,
// scales by cap: within an ulp or two of this).
void op_softcap(const Tensor& dst, const OpContext& c) {
  const Tensor* a = dst.src[0];
  if (std::string e = check_f32(dst, a, nullptr, "softcap"); !e.empty()) return fail(c, e);
  if (a->ne[0] != dst.ne[0] || a->n_rows() != dst.n_rows())
    return fail(c, "softcap: " + dst.name + ": shape of " + shape_str(*a) + " does not match");
  const int64_t k = dst.ne[0];
  const float cap = dst.fparams[0];
  for_each_row_chunk(c, dst.n_rows(), k, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* y = dst_row(dst, r);
      const float* x = src_row(*a, r);
      for (int64_t i = 0; i < k; ++i) y[i] = cap * std::tanh(x[i] / cap);
    }
  });
}

void op_rms_norm(const Tensor& dst, const OpContext& c) {
  const Tensor* a = dst.src[0];
  if (std::string e = check_f32(dst, a, nullptr, "rms_norm"); !e.empty()) return fail(c, e);
  if (a->ne[0] != dst.ne[0] || a->n_rows() != dst.n_rows())
    return fail(c, "rms_norm: " + dst.name + ": shape of " + shape_str(*a) + " does not match");
  const int64_t k = dst.ne[0];
  for_each_row_chunk(c, dst.n_rows(), k, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) rms_norm_row(dst_row(dst, r), src_row(*a, r), dst.fparams[0], k);
  });
}

void op_layer_norm(const Tensor& dst, const OpContext& c) {
  const Tensor* a = dst.src[0];
  if (std::string e = check_f32(dst, a, nullptr, "layer_norm"); !e.empty()) return fail(c, e);
  if (a->ne[0] != dst.ne[0] || a->n_rows() != dst.n_rows())
    return fail(c, "layer_norm: " + dst.name + ": shape of " + shape_str(*a) + " does not match");
  const int64_t k = dst.ne[0];
  for_each_row_chunk(c, dst.n_rows(), k, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) layer_norm_row(dst_row(dst, r), src_row(*a, r), dst.fparams[0], k);
  });
}

bool can_fuse_rms_norm_mul(const Tensor& norm, const Tensor& mul) {
  const Tensor* w = mul.src[1];
  return norm.op == Op::RmsNorm && mul.op == Op::Mul && mul.src[0] == &norm && w && w != &norm &&
         w->dtype == DType::F32 && norm.dtype == DType::F32 && mul.dtype == DType::F32 &&
         norm.nb[0] == sizeof(float) && mul.nb[0] == sizeof(float) && w->nb[0] == sizeof(float) &&
         mul.ne[0] == norm.ne[0] && w->ne[0] == norm.ne[0] && mul.n_rows() == norm.n_rows() &&
         (w->n_rows() == 1 || w->n_rows() == norm.n_rows());
}

void op_rms_norm_mul(const Tensor& norm, const Tensor& mul, const OpContext& c) {
  const Tensor* a = norm.src[0];
  if (std::string e = check_f32(norm, a, nullptr, "rms_norm"); !e.empty()) return fail(c, e);
  if (a->ne[0] != norm.ne[0] || a->n_rows() != norm.n_rows())
    return fail(c, "rms_norm: " + norm.name + ": shape of " + shape_str(*a) + " does not match");
  const Tensor& w = *mul.src[1];
  const int64_t k = norm.ne[0];
  // Row by row, so the normalized row is still in L1 when it is scaled.
  for_each_row_chunk(c, norm.n_rows(), k, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* n = dst_row(norm, r);
      rms_norm_row(n, src_row(*a, r), norm.fparams[0], k);
      float* y[1] = {dst_row(mul, r)};
      const float* ap[1] = {n};
      const float* bp[1] = {w.n_rows() == 1 ? static_cast<const float*>(w.data) : src_row(w, r)};
      binary_rows(BinOp::Mul, y, ap, bp, 1, k);
    }
  });
}

void op_gelu_mul(const Tensor& dst, const OpContext& c) {
  const Tensor* a = dst.src[0];
  const Tensor* b = dst.src[1];
  if (std::string e = check_f32(dst, a, b ? b : &dst, "gelu_mul"); !e.empty() || !b)
    return fail(c, e.empty() ? "gelu_mul: " + dst.name + ": missing operand" : e);
  const int64_t k = dst.ne[0];
  if (a->ne[0] != k || b->ne[0] != k || a->n_rows() != dst.n_rows() || b->n_rows() != dst.n_rows())
    return fail(c, "gelu_mul: " + dst.name + ": shapes " + shape_str(*a) + " and " +
                       shape_str(*b) + " do not match");
  const bool exact = dst.iparams[0] == 1 || c.exact;
  const uint16_t* table = exact ? nullptr : gelu_table();
  for_each_row_chunk(c, dst.n_rows(), k, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* y = dst_row(dst, r);
      const float* ar = src_row(*a, r);
      const float* br = src_row(*b, r);
      if (exact) {
        for (int64_t i = 0; i < k; ++i) y[i] = gelu_tanh(ar[i]) * br[i];
      } else {
        gelu_mul_row(y, ar, br, k, table);
      }
    }
  });
}

void op_gelu(const Tensor& dst, const OpContext& c) {
  const Tensor* a = dst.src[0];
  if (std::string e = check_f32(dst, a, nullptr, "gelu"); !e.empty()) return fail(c, e);
  const int64_t k = dst.ne[0];
  if (a->ne[0] != k || a->n_rows() != dst.n_rows())
    return fail(c, "gelu: " + dst.name + ": shape of " + shape_str(*a) + " does not match");
  const bool exact = c.exact;
  const uint16_t* table = exact ? nullptr : gelu_table();
  for_each_row_chunk(c, dst.n_rows(), k, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* y = dst_row(dst, r);
      const float* x = src_row(*a, r);
      for (int64_t i = 0; i < k; ++i) {
        const float v = x[i];
        y[i] = exact ? gelu_tanh(v) : v <= -10.0f ? 0.0f : v >= 10.0f ? v : fp16_to_f32_fast(table[f32_to_fp16_fast(v)]);
      }
    }
  });
}

}  // namespace weir::cpu
