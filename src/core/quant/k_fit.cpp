// Scale searches for the K-quants; see k_fit.h for the idea.
#include "core/quant/k_fit.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"

namespace weir::quant {
namespace {

constexpr float kMaxFp16 = 65504.0f;

// Nearest integer (ties to even) of v clamped to [lo, hi]. Clamping first
// keeps the float trick below in its range (|v| < 2^22) and maps inf to the
// ends; NaN gives 0.
inline int round_clamped(float v, int lo, int hi) {
  v = v < float(lo) ? float(lo) : v;
  v = v > float(hi) ? float(hi) : v;
  float t = v + 12582912.0f;  // 1.5 * 2^23: the sum's low mantissa bits are round(v)
  int32_t i;
  std::memcpy(&i, &t, 4);
  return (i & 0x007fffff) - 0x00400000;
}

// The fp16 value for a wanted super-block scale v >= 0, rounded up (the
// largest sub-block scale then never has to clip) and kept finite (an inf
// scale would dequantize 0 * inf).
inline uint16_t to_fp16_scale(float v) {
  if (!(v > 0.0f)) return 0;
  uint16_t h = f32_to_fp16(std::min(v, kMaxFp16));
  if (fp16_to_f32(h) < v && h < 0x7bff) ++h;  // next fp16 up (positive values)
  return h;
}

// ---------------------------------------------------------------------------
// Affine (scale + min) blocks.
// ---------------------------------------------------------------------------

// Trial scales map the sub-block's range to qmax + kAffineStep * k levels.
constexpr int kAffineSteps = 5;
constexpr float kAffineStep = 0.2f;

// Best continuous (s >= 0, m >= 0) with x ~ s * L - m over trial scales.
void fit_affine_sub(const float* x, int n, int qmax, float* s_out, float* m_out) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  lo = std::min(lo, 0.0f);  // the min is subtracted: offsets are <= 0
  if (!(hi > lo)) {         // constant block (or NaN): min only
    *s_out = 0.0f;
    *m_out = -lo;
    return;
  }
  float fx = 0, fxx = 0;
  for (int i = 0; i < n; ++i) {
    fx += x[i];
    fxx += x[i] * x[i];
  }
  const double sum_x = fx, sum_xx = fxx;
  double best_err = INFINITY;
  float best_s = (hi - lo) / float(qmax), best_m = -lo;
  for (int k = -kAffineSteps; k <= kAffineSteps; ++k) {
    const float iscale = (float(qmax) + kAffineStep * float(k)) / (hi - lo);
    int isl = 0, isll = 0;
    float fxl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = round_clamped((x[i] - lo) * iscale, 0, qmax);
      isl += l;
      isll += l * l;
      fxl += x[i] * float(l);
    }
    const double sl = isl, sll = isll, sxl = fxl;
    const double det = n * sll - sl * sl;
    if (!(det > 0)) continue;
    double s = (n * sxl - sl * sum_x) / det;
    double b = (sll * sum_x - sl * sxl) / det;  // offset, x ~ s * L + b
    if (b > 0) {
      b = 0;
      s = sxl / sll;
    }
    if (!(s > 0)) continue;
    const double err = sum_xx - 2 * s * sxl - 2 * b * sum_x + s * s * sll + 2 * s * b * sl + n * b * b;
    if (err < best_err) {
      best_err = err;
      best_s = float(s);
      best_m = float(-b);
    }
  }
  *s_out = best_s;
  *m_out = best_m;
}

// Quants of one sub-block for the stored factors S = d * sc, M = dmin * mn
// (exact float products, as the dequantizer forms them); returns the error.
float requant_affine(const float* x, int n, int qmax, float S, float M, uint8_t* L) {
  const float iS = S > 0.0f ? 1.0f / S : 0.0f;
  float err = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = round_clamped((x[i] + M) * iS, 0, qmax);
    L[i] = uint8_t(l);
    const float e = S * float(l) - M - x[i];
    err += e * e;
  }
  return err;
}

struct AffineState {
  float d, dmin;  // fp16-exact values
  float err[16];
};

float requant_all_affine(const float* x, const AffineShape& p, AffineBlock* b, AffineState* st) {
  float total = 0.0f;
  for (int j = 0; j < p.n_sub; ++j) {
    st->err[j] = requant_affine(x + j * p.sub_len, p.sub_len, p.qmax, st->d * float(b->sc[j]),
                                st->dmin * float(b->mn[j]), b->L + j * p.sub_len);
    total += st->err[j];
  }
  return total;
}

// Moves each sub-block's (sc, mn) by at most one step where that helps.
void local_search_affine(const float* x, const AffineShape& p, AffineBlock* b, AffineState* st) {
  uint8_t L[32];
  for (int j = 0; j < p.n_sub; ++j) {
    const float* xs = x + j * p.sub_len;
    int best_sc = b->sc[j], best_mn = b->mn[j];
    for (int ds = -1; ds <= 1; ++ds) {
      for (int dm = -1; dm <= 1; ++dm) {
        const int sc = b->sc[j] + ds, mn = b->mn[j] + dm;
        if ((ds == 0 && dm == 0) || sc < 0 || sc > p.smax || mn < 0 || mn > p.smax) continue;
        const float e = requant_affine(xs, p.sub_len, p.qmax, st->d * float(sc), st->dmin * float(mn), L);
        if (e < st->err[j]) {
          st->err[j] = e;
          best_sc = sc;
          best_mn = mn;
        }
      }
    }
    b->sc[j] = uint8_t(best_sc);
    b->mn[j] = uint8_t(best_mn);
    requant_affine(xs, p.sub_len, p.qmax, st->d * float(best_sc), st->dmin * float(best_mn), b->L + j * p.sub_len);
  }
}

// Least-squares (d, dmin) for the current integers; kept if it helps.
void refit_affine(const float* x, const AffineShape& p, AffineBlock* b, AffineState* st) {
  double saa = 0, sac = 0, scc = 0, sax = 0, scx = 0;
  for (int j = 0; j < p.n_sub; ++j) {
    const double c = b->mn[j];
    for (int i = 0; i < p.sub_len; ++i) {
      const double a = double(b->sc[j]) * b->L[j * p.sub_len + i];
      const double xv = x[j * p.sub_len + i];
      saa += a * a;
      sac += a * c;
      scc += c * c;
      sax += a * xv;
      scx += c * xv;
    }
  }
  // minimise sum (d * a - e * c - x)^2
  double d = 0, e = 0;
  const double det = saa * scc - sac * sac;
  if (det > 0) {
    d = (sax * scc - scx * sac) / det;
    e = (sax * sac - scx * saa) / det;
  }
  if (!(det > 0) || e < 0) {
    e = 0;
    d = saa > 0 ? sax / saa : 0;
  }
  if (!(d > 0)) return;
  AffineBlock trial = *b;
  AffineState ts = *st;
  ts.d = fp16_to_f32(to_fp16_scale(float(d)));
  ts.dmin = fp16_to_f32(to_fp16_scale(float(e)));
  float before = 0.0f;
  for (int j = 0; j < p.n_sub; ++j) before += st->err[j];
  if (requant_all_affine(x, p, &trial, &ts) < before) {
    *b = trial;
    *st = ts;
  }
}

// ---------------------------------------------------------------------------
// Symmetric blocks.
// ---------------------------------------------------------------------------

// Best continuous s with x ~ s * L over trial scales mapping the largest
// magnitude to either end of [qmin, qmax].
float fit_symmetric_sub(const float* x, int n, int qmin, int qmax) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (!(amax > 0.0f)) return 0.0f;
  double best_score = -1, best_s = 0;
  for (int side = 0; side < 2; ++side) {
    const float end = side == 0 ? float(qmin) : float(qmax);  // where max goes
    for (int k = -4; k <= 4; ++k) {
      const float iscale = (end + (end < 0 ? -0.15f : 0.15f) * float(k)) / max;
      int isll = 0;
      float fxl = 0;
      for (int i = 0; i < n; ++i) {
        const int l = round_clamped(x[i] * iscale, qmin, qmax);
        isll += l * l;
        fxl += x[i] * float(l);
      }
      const double sll = isll, sxl = fxl;
      if (!(sll > 0)) continue;
      const double score = sxl * sxl / sll;  // error = sum x^2 - score
      if (score > best_score) {
        best_score = score;
        best_s = sxl / sll;
      }
    }
  }
  return float(best_s);
}

float requant_symmetric(const float* x, int n, int qmin, int qmax, float S, int8_t* L) {
  const float iS = S != 0.0f ? 1.0f / S : 0.0f;
  float err = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = round_clamped(x[i] * iS, qmin, qmax);
    L[i] = int8_t(l);
    const float e = S * float(l) - x[i];
    err += e * e;
  }
  return err;
}

struct SymmetricState {
  float d;
  float err[16];
};

float requant_all_symmetric(const float* x, const SymmetricShape& p, SymmetricBlock* b, SymmetricState* st) {
  float total = 0.0f;
  for (int j = 0; j < p.n_sub; ++j) {
    st->err[j] = requant_symmetric(x + j * p.sub_len, p.sub_len, p.qmin, p.qmax, st->d * float(b->sc[j]),
                                   b->L + j * p.sub_len);
    total += st->err[j];
  }
  return total;
}

void local_search_symmetric(const float* x, const SymmetricShape& p, SymmetricBlock* b, SymmetricState* st) {
  int8_t L[32];
  for (int j = 0; j < p.n_sub; ++j) {
    const float* xs = x + j * p.sub_len;
    int best = b->sc[j];
    for (int ds = -2; ds <= 2; ++ds) {
      const int sc = b->sc[j] + ds;
      if (ds == 0 || sc < -p.smax || sc > p.smax) continue;
      const float e = requant_symmetric(xs, p.sub_len, p.qmin, p.qmax, st->d * float(sc), L);
      if (e < st->err[j]) {
        st->err[j] = e;
        best = sc;
      }
    }
    b->sc[j] = int8_t(best);
    requant_symmetric(xs, p.sub_len, p.qmin, p.qmax, st->d * float(best), b->L + j * p.sub_len);
  }
}

void refit_symmetric(const float* x, const SymmetricShape& p, SymmetricBlock* b, SymmetricState* st) {
  double saa = 0, sax = 0;
  for (int j = 0; j < p.n_sub; ++j) {
    for (int i = 0; i < p.sub_len; ++i) {
      const double a = double(b->sc[j]) * b->L[j * p.sub_len + i];
      saa += a * a;
      sax += a * x[j * p.sub_len + i];
    }
  }
  if (!(saa > 0) || !(sax > 0)) return;
  SymmetricBlock trial = *b;
  SymmetricState ts = *st;
  ts.d = fp16_to_f32(to_fp16_scale(float(sax / saa)));
  float before = 0.0f;
  for (int j = 0; j < p.n_sub; ++j) before += st->err[j];
  if (requant_all_symmetric(x, p, &trial, &ts) < before) {
    *b = trial;
    *st = ts;
  }
}

}  // namespace

void fit_affine_superblock(const float* x, const AffineShape& p, AffineBlock* b) {
  float s[16], m[16], max_s = 0.0f, max_m = 0.0f;
  for (int j = 0; j < p.n_sub; ++j) {
    fit_affine_sub(x + j * p.sub_len, p.sub_len, p.qmax, &s[j], &m[j]);
    max_s = std::max(max_s, s[j]);
    max_m = std::max(max_m, m[j]);
  }
  b->d = to_fp16_scale(max_s / float(p.smax));
  b->dmin = to_fp16_scale(max_m / float(p.smax));
  AffineState st;
  st.d = fp16_to_f32(b->d);
  st.dmin = fp16_to_f32(b->dmin);
  const float id = st.d > 0.0f ? 1.0f / st.d : 0.0f;
  const float idmin = st.dmin > 0.0f ? 1.0f / st.dmin : 0.0f;
  for (int j = 0; j < p.n_sub; ++j) {
    b->sc[j] = uint8_t(round_clamped(s[j] * id, 0, p.smax));
    b->mn[j] = uint8_t(round_clamped(m[j] * idmin, 0, p.smax));
  }
  requant_all_affine(x, p, b, &st);
  for (int round = 0; round < 2; ++round) {
    local_search_affine(x, p, b, &st);
    refit_affine(x, p, b, &st);
  }
  b->d = f32_to_fp16(st.d);
  b->dmin = f32_to_fp16(st.dmin);
  // Never worse than all zeros (data below fp16's range for d, say).
  float err = 0.0f, zero = 0.0f;
  for (int j = 0; j < p.n_sub; ++j) err += st.err[j];
  for (int i = 0; i < p.n_sub * p.sub_len; ++i) zero += x[i] * x[i];
  if (!(err <= zero)) std::memset(b, 0, sizeof *b);
}

void fit_symmetric_superblock(const float* x, const SymmetricShape& p, SymmetricBlock* b) {
  float s[16], amax = 0.0f;
  for (int j = 0; j < p.n_sub; ++j) {
    s[j] = fit_symmetric_sub(x + j * p.sub_len, p.sub_len, p.qmin, p.qmax);
    amax = std::max(amax, std::fabs(s[j]));
  }
  b->d = to_fp16_scale(amax / float(p.smax));
  SymmetricState st;
  st.d = fp16_to_f32(b->d);
  const float id = st.d > 0.0f ? 1.0f / st.d : 0.0f;
  for (int j = 0; j < p.n_sub; ++j) b->sc[j] = int8_t(round_clamped(s[j] * id, -p.smax, p.smax));
  requant_all_symmetric(x, p, b, &st);
  for (int round = 0; round < 2; ++round) {
    local_search_symmetric(x, p, b, &st);
    refit_symmetric(x, p, b, &st);
  }
  b->d = f32_to_fp16(st.d);
  float err = 0.0f, zero = 0.0f;
  for (int j = 0; j < p.n_sub; ++j) err += st.err[j];
  for (int i = 0; i < p.n_sub * p.sub_len; ++i) zero += x[i] * x[i];
  if (!(err <= zero)) std::memset(b, 0, sizeof *b);
}

}  // namespace weir::quant
