// attention: q [D, Hq, T] (any strides, rows contiguous), k and v [D, Hkv, S]
// (views into a KV cache, F32, F16 or Q8_0; row stride nb[1] between heads, nb[2]
// between positions), mask F32 [S, T] of 0 / -inf, scale in fparams[0].
// Output [D*Hq, T]: head h of token t in columns h*D .. h*D+D-1 of row t.
//
// Per (token t, head h), with g = h / (Hq / Hkv) the kv head, as llama.cpp's
// non-flash CPU path computes it:
//   s_j = dot(q, k_j) * scale + mask[t][j]                      (float)
//   p_j = expf(s_j - max) * float(1 / sum_j expf(s_j - max))    (sum in double)
//   out = sum_j p_j v_j                                          (float)
// Keys whose mask is -inf are skipped (a run of them costs one compare per
// key). A row with every key masked gives zeros. Extras (graph.h): a soft
// cap makes s_j = cap * tanhf(dot * scale / cap) + mask[t][j]; a sink adds
// expf(sink_h - max) to the sum (the max taken over the keys and the sink).
//
// Work units: with enough tokens, (t, g) pairs, each doing the Hq/Hkv query
// heads that share kv head g together, so every key and value row is read
// once for all of them (register tiles of 4 heads x 4 keys for the scores,
// 4 heads x 4 vectors of dims for the output); with few tokens (decode),
// (t, h) pairs so every thread has work. Threads take units in small chunks
// from the shared counter, which balances causal masks (later tokens see
// more keys).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ops_common.h"
#include "backend/cpu/ops_dequant.h"
#include "backend/cpu/ops_simd.h"

namespace weir::cpu {
namespace {

using namespace simd;

constexpr int kKeyBlock = 64;  // keys converted (f16) and tiled together

struct AttnArgs {
  const Tensor* q;
  const Tensor* k;
  const Tensor* v;
  const Tensor* mask;
  const Tensor* out;
  int64_t D, Hq, T, Hkv, S;
  int64_t heads_per_unit;  // Hq / Hkv (grouped units) or 1
  float scale;
  float cap;           // the scores' soft cap, 0: none
  const float* sinks;  // [Hq] or null
  int64_t u0, u1;  // the work units [u0, u1) to run (see attention_run_impl)
  float* scores;  // S * heads_per_unit floats, key-major
  float* acc;     // heads_per_unit * D floats
  float* conv;    // kKeyBlock * D floats (f16 caches)
};

// Rows j0 .. j0+n-1 (n <= kKeyBlock) of kv head g of a cache as floats:
// in place for F32 (returns the first row, *ld = the row stride in floats),
// converted into conv for F16 and Q8_0 (*ld = D).
WEIR_INLINE const float* cache_rows(const Tensor& c, int64_t g, int64_t j0, int n, int64_t D,
                                    float* conv, size_t* ld) {
  const auto* base = static_cast<const uint8_t*>(c.data) + g * c.nb[1] + j0 * c.nb[2];
  if (c.dtype == DType::F32) {
    *ld = c.nb[2] / sizeof(float);
    return reinterpret_cast<const float*>(base);
  }
  dequantize_rows(c.dtype, base, c.nb[2], n, D, conv, size_t(D));  // F16 exact; both vectorized
  *ld = size_t(D);
  return conv;
}

// The next run of unmasked keys in [j, S), at most kKeyBlock long: returns
// its start (S when none is left) and sets *end.
WEIR_INLINE int64_t next_run(const float* mrow, int64_t j, int64_t S, int64_t* end) {
  while (j < S && mrow[j] == -INFINITY) ++j;
  int64_t e = j;
  while (e < S && e - j < kKeyBlock && mrow[e] != -INFINITY) ++e;
  *end = e;
  return j;
}

// sc[h * lds + i] = dot(q row h, key i) for NH heads (q rows ldq apart) and
// n keys (rows ldk apart), in tiles of 4 keys.
template <class V, int NH>
WEIR_INLINE void score_block(const float* q, size_t ldq, const float* k, size_t ldk, int n, int64_t D,
                             float* sc, size_t lds) {
  const float* qr[NH];
  for (int h = 0; h < NH; ++h) qr[h] = q + h * ldq;
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    float* yo[NH];
    for (int h = 0; h < NH; ++h) yo[h] = sc + h * lds + i;
    dot_tile<V, 4, NH>(k + i * ldk, ldk, qr, D, yo);
  }
  for (; i < n; ++i) {
    float* yo[NH];
    for (int h = 0; h < NH; ++h) yo[h] = sc + h * lds + i;
    dot_tile<V, 1, NH>(k + i * ldk, ldk, qr, D, yo);
  }
}

// acc[h][d] += sum_i p[h * ldp + i] * v[i * ldv + d] for MH heads, all D dims.
// (Plain loops: the d loop vectorizes as an axpy.)
template <class V, int MH>
WEIR_INLINE void accumulate_tile(const float* p, size_t ldp, const float* v, size_t ldv, int n,
                                 int64_t D, float* acc, size_t lda) {
  for (int i = 0; i < n; ++i)
    for (int h = 0; h < MH; ++h) {
      const float pi = p[h * ldp + i];
      const float* __restrict vi = v + i * ldv;
      float* __restrict ah = acc + h * lda;
      for (int64_t d = 0; d < D; ++d) ah[d] += pi * vi[d];
    }
}

// accumulate_tile with intrinsics for AVX-512 and AVX2 (GCC 12 builds the
// broadcasts of generic vector code lane by lane). Called, not inlined.
template <int MH>
WEIR_TARGET_AVX512 void accumulate_tile_avx512(const float* p, size_t ldp, const float* v, size_t ldv,
                                               int n, int64_t D, float* acc, size_t lda) {
  int64_t d = 0;
  for (; d + 64 <= D; d += 64) {
    __m512 a[MH][4];
#pragma GCC unroll 8
    for (int h = 0; h < MH; ++h)
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) a[h][u] = _mm512_loadu_ps(acc + h * lda + d + 16 * u);
    for (int i = 0; i < n; ++i) {
      const float* vi = v + i * ldv + d;
      const __m512 v0 = _mm512_loadu_ps(vi), v1 = _mm512_loadu_ps(vi + 16);
      const __m512 v2 = _mm512_loadu_ps(vi + 32), v3 = _mm512_loadu_ps(vi + 48);
#pragma GCC unroll 8
      for (int h = 0; h < MH; ++h) {
        const __m512 pb = _mm512_broadcastss_ps(_mm_load_ss(p + h * ldp + i));
        a[h][0] = _mm512_fmadd_ps(pb, v0, a[h][0]);
        a[h][1] = _mm512_fmadd_ps(pb, v1, a[h][1]);
        a[h][2] = _mm512_fmadd_ps(pb, v2, a[h][2]);
        a[h][3] = _mm512_fmadd_ps(pb, v3, a[h][3]);
      }
    }
#pragma GCC unroll 8
    for (int h = 0; h < MH; ++h)
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) _mm512_storeu_ps(acc + h * lda + d + 16 * u, a[h][u]);
  }
  if (d < D) accumulate_tile<v16sf, MH>(p, ldp, v + d, ldv, n, D - d, acc + d, lda);
}

template <int MH>
WEIR_TARGET_AVX2 void accumulate_tile_avx2(const float* p, size_t ldp, const float* v, size_t ldv,
                                           int n, int64_t D, float* acc, size_t lda) {
  int64_t d = 0;
  for (; d + 16 <= D; d += 16) {
    __m256 a[MH][2];
#pragma GCC unroll 8
    for (int h = 0; h < MH; ++h) {
      a[h][0] = _mm256_loadu_ps(acc + h * lda + d);
      a[h][1] = _mm256_loadu_ps(acc + h * lda + d + 8);
    }
    for (int i = 0; i < n; ++i) {
      const __m256 v0 = _mm256_loadu_ps(v + i * ldv + d), v1 = _mm256_loadu_ps(v + i * ldv + d + 8);
#pragma GCC unroll 8
      for (int h = 0; h < MH; ++h) {
        const __m256 pb = _mm256_broadcast_ss(p + h * ldp + i);
        a[h][0] = _mm256_fmadd_ps(pb, v0, a[h][0]);
        a[h][1] = _mm256_fmadd_ps(pb, v1, a[h][1]);
      }
    }
#pragma GCC unroll 8
    for (int h = 0; h < MH; ++h) {
      _mm256_storeu_ps(acc + h * lda + d, a[h][0]);
      _mm256_storeu_ps(acc + h * lda + d + 8, a[h][1]);
    }
  }
  if (d < D) accumulate_tile<v8sf, MH>(p, ldp, v + d, ldv, n, D - d, acc + d, lda);
}

template <class V, int MH>
WEIR_INLINE void accumulate(const float* p, size_t ldp, const float* v, size_t ldv, int n, int64_t D,
                            float* acc, size_t lda) {
  if constexpr (kLanes<V> == 16)
    accumulate_tile_avx512<MH>(p, ldp, v, ldv, n, D, acc, lda);
  else if constexpr (kLanes<V> == 8)
    accumulate_tile_avx2<MH>(p, ldp, v, ldv, n, D, acc, lda);
  else
    accumulate_tile<V, MH>(p, ldp, v, ldv, n, D, acc, lda);
}

// vexp (e^x for a vector, x <= 0) is in ops_simd.h.

// Softmax pieces over the unmasked keys of one head: s = s * scale + mask,
// then the running max.
template <class V>
WEIR_INLINE float scale_mask_max(float* s, const float* m, int n, float scale, float mx) {
  constexpr int L = kLanes<V>;
  int i = 0;
  if (n >= L) {
    V vm = splat<V>(mx);
    for (; i + L <= n; i += L) {
      const V v = loadu<V>(s + i) * scale + loadu<V>(m + i);
      storeu<V>(s + i, v);
      vm = vm > v ? vm : v;
    }
    for (int l = 0; l < L; ++l) mx = std::max(mx, vm[l]);
  }
  for (; i < n; ++i) {
    s[i] = s[i] * scale + m[i];
    mx = std::max(mx, s[i]);
  }
  return mx;
}

// s = exp(s - mx); returns the sum of the results (double accumulation).
// scale_mask_max with a soft cap: s = cap * tanh(s * scale / cap) + mask.
WEIR_INLINE float cap_mask_max(float* s, const float* m, int n, float scale, float cap, float mx) {
  const float inv = 1.0f / cap;
  for (int i = 0; i < n; ++i) {
    s[i] = cap * std::tanh(s[i] * scale * inv) + m[i];
    mx = std::max(mx, s[i]);
  }
  return mx;
}

template <class V>
WEIR_INLINE double exp_sum(float* s, int n, float mx) {
  constexpr int L = kLanes<V>;
  using VD = typename VecOf<V>::f64;
  VD acc = {};
  int i = 0;
  for (; i + L <= n; i += L) {
    const V e = vexp<V>(loadu<V>(s + i) - mx);
    storeu<V>(s + i, e);
    acc += __builtin_convertvector(e, VD);
  }
  double sum = 0.0;
  for (int l = 0; l < L; ++l) sum += acc[l];
  for (; i < n; ++i) {
    V x{};
    x[0] = s[i] - mx;
    const float e = vexp<V>(x)[0];
    s[i] = e;
    sum += double(e);
  }
  return sum;
}

template <class V>
WEIR_INLINE void scale_run(float* s, int n, float f) {
  for (int i = 0; i < n; ++i) s[i] *= f;
}

// One unit: token t, heads h0 .. h0+nh-1 (all of kv head g).
template <class V>
WEIR_INLINE void attention_unit(const AttnArgs& a, int64_t t, int64_t h0, int nh, int64_t g) {
  const int64_t D = a.D, S = a.S;
  const float* q = a.q->row_ptr<float>(h0, t);
  const size_t ldq = a.q->nb[1] / sizeof(float);
  const float* mrow = a.mask->row_ptr<float>(t);
  float* sc = a.scores;  // head-major: sc[h * S + j]
  const size_t lds = size_t(S);
  float mx[64];
  double sum[64];
  for (int h = 0; h < nh; ++h) mx[h] = -INFINITY, sum[h] = 0.0;

  // Scores s_j = dot(q, k_j) * scale + mask_j for unmasked keys.
  size_t ld;
  for (int64_t j1, j = next_run(mrow, 0, S, &j1); j < S; j = next_run(mrow, j1, S, &j1)) {
    const int n = int(j1 - j);
    const float* kr = cache_rows(*a.k, g, j, n, D, a.conv, &ld);
    int h = 0;
    for (; h + 4 <= nh; h += 4) score_block<V, 4>(q + h * ldq, ldq, kr, ld, n, D, sc + h * lds + j, lds);
    for (; h < nh; ++h) score_block<V, 1>(q + h * ldq, ldq, kr, ld, n, D, sc + h * lds + j, lds);
    for (h = 0; h < nh; ++h)
      mx[h] = a.cap > 0.0f ? cap_mask_max(sc + h * lds + j, mrow + j, n, a.scale, a.cap, mx[h])
                           : scale_mask_max<V>(sc + h * lds + j, mrow + j, n, a.scale, mx[h]);
  }
  // A sink is one more key of no value; a row that saw no key stays empty.
  if (a.sinks)
    for (int h = 0; h < nh; ++h)
      if (mx[h] != -INFINITY) {
        const float sk = a.sinks[h0 + h];
        mx[h] = std::max(mx[h], sk);
        sum[h] += double(std::exp(sk - mx[h]));
      }
  // Softmax: exponentials, their sums in double, then p = e * float(1/sum).
  for (int64_t j1, j = next_run(mrow, 0, S, &j1); j < S; j = next_run(mrow, j1, S, &j1))
    for (int h = 0; h < nh; ++h) sum[h] += exp_sum<V>(sc + h * lds + j, int(j1 - j), mx[h]);
  float inv[64];
  for (int h = 0; h < nh; ++h) inv[h] = mx[h] == -INFINITY ? 0.0f : float(1.0 / sum[h]);
  for (int64_t j1, j = next_run(mrow, 0, S, &j1); j < S; j = next_run(mrow, j1, S, &j1))
    for (int h = 0; h < nh; ++h) scale_run<V>(sc + h * lds + j, int(j1 - j), inv[h]);

  // out = sum_j p_j v_j.
  float* acc = a.acc;
  std::memset(acc, 0, size_t(nh) * size_t(D) * sizeof(float));
  for (int64_t j1, j = next_run(mrow, 0, S, &j1); j < S; j = next_run(mrow, j1, S, &j1)) {
    const int n = int(j1 - j);
    const float* vr = cache_rows(*a.v, g, j, n, D, a.conv, &ld);
    int h = 0;
    for (; h + 4 <= nh; h += 4) accumulate<V, 4>(sc + h * lds + j, lds, vr, ld, n, D, acc + h * D, size_t(D));
    for (; h < nh; ++h) accumulate<V, 1>(sc + h * lds + j, lds, vr, ld, n, D, acc + h * D, size_t(D));
  }
  // Fully masked rows visit no key: acc stays zero.
  std::memcpy(a.out->row_ptr<float>(t) + h0 * D, acc, size_t(nh) * size_t(D) * sizeof(float));
}

template <class V>
WEIR_INLINE void attention_run_impl(const AttnArgs& a) {
  const int64_t group = a.Hq / a.Hkv;
  const int64_t per = a.heads_per_unit;  // group or 1
  const int64_t units_per_token = a.Hq / per;
  for (int64_t u = a.u0; u < a.u1; ++u) {
    const int64_t t = u / units_per_token;
    const int64_t h0 = (u % units_per_token) * per;
    attention_unit<V>(a, t, h0, int(per), h0 / group);
  }
}

WEIR_DISPATCH(attention_run, (const AttnArgs& a), (a))

}  // namespace

void op_attention(const Tensor& dst, const OpContext& c) {
  const Tensor* q = dst.src[0];
  const Tensor* k = dst.src[1];
  const Tensor* v = dst.src[2];
  const Tensor* mask = dst.src[3];
  if (!q || !k || !v || !mask) return fail(c, "attention: " + dst.name + ": missing operands");
  const std::string where = "attention " + dst.name;
  if (q->dtype != DType::F32 || q->nb[0] != sizeof(float) || q->nb[1] % sizeof(float) != 0)
    return fail(c, where + ": q " + q->name + " must be F32 with contiguous rows");
  for (const Tensor* kv : {k, v}) {
    // Q8_0: whole blocks a head (D a multiple of 32), blocks back to back.
    const bool q8 = kv->dtype == DType::Q8_0;
    const size_t es = kv->dtype == DType::F32 ? 4 : kv->dtype == DType::F16 ? 2 : q8 ? 2 : 0;
    if (es == 0 || kv->nb[0] != (q8 ? traits(DType::Q8_0).type_size : es) || kv->nb[2] % es != 0 ||
        (q8 && kv->ne[0] % 32 != 0))
      return fail(c, where + ": " + kv->name + " must be F32, F16 or Q8_0 with contiguous rows");
  }
  if (mask->dtype != DType::F32 || mask->nb[0] != sizeof(float))
    return fail(c, where + ": mask " + mask->name + " must be F32");
  if (dst.dtype != DType::F32 || dst.nb[0] != sizeof(float))
    return fail(c, where + ": output must be F32");
  AttnArgs a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.mask = mask;
  a.out = &dst;
  a.D = q->ne[0];
  a.Hq = q->ne[1];
  a.T = q->ne[2];
  a.Hkv = k->ne[1];
  a.S = k->ne[2];
  a.scale = dst.fparams[0];
  a.cap = dst.fparams[1] > 0.0f ? dst.fparams[1] : 0.0f;
  const Tensor* sinks = dst.src[4];
  if (sinks && (sinks->dtype != DType::F32 || !sinks->is_contiguous() || sinks->n_elements() != q->ne[1]))
    return fail(c, where + ": sinks " + sinks->name + " must be F32 with a value per query head");
  a.sinks = sinks ? static_cast<const float*>(sinks->data) : nullptr;
  if (k->ne[0] != a.D || v->ne[0] != a.D || v->ne[1] != a.Hkv || v->ne[2] != a.S || a.Hkv <= 0 ||
      a.Hq % a.Hkv != 0 || mask->ne[0] != a.S || mask->ne[1] != a.T || dst.ne[0] != a.D * a.Hq ||
      dst.ne[1] != a.T || q->ne[3] != 1 || k->ne[3] != 1)
    return fail(c, where + ": shapes q " + shape_str(*q) + ", k " + shape_str(*k) + ", v " +
                       shape_str(*v) + ", mask " + shape_str(*mask) + " do not fit");
  const int64_t group = a.Hq / a.Hkv;
  if (group > 64) return fail(c, where + ": more than 64 query heads per kv head");
  // Grouped units when there are enough of them to keep every thread busy.
  a.heads_per_unit = a.T * a.Hkv >= 4 * int64_t(c.nth) ? group : 1;
  Scratch local;
  Scratch* s = c.scratch ? c.scratch : &local;
  const bool f16 = k->dtype != DType::F32 || v->dtype != DType::F32;  // rows converted
  const size_t hp = size_t(a.heads_per_unit);
  const size_t n = size_t(a.S) * hp + hp * size_t(a.D) + (f16 ? size_t(kKeyBlock) * size_t(a.D) : 0);
  float* buf = s->floats(n);
  a.scores = buf;
  a.acc = buf + size_t(a.S) * hp;
  a.conv = f16 ? a.acc + hp * size_t(a.D) : nullptr;
  const int64_t units = a.T * (a.Hq / a.heads_per_unit);
  for_each_chunk(c, units, chunk_size(c, units, 1, 16), [&](int64_t u0, int64_t u1) {
    a.u0 = u0;
    a.u1 = u1;
    attention_run(a);
  });
}

}  // namespace weir::cpu
