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

// The same rounding in float arithmetic only (v already clamped to a small
// range), which the compiler can vectorize with baseline SSE2.
inline float round_small(float v) { return (v + 12582912.0f) - 12582912.0f; }

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

// Trial scales map the sub-block's range (or its largest magnitude) to
// `end + 1 - 0.5 k` levels, k < trials(qmax): integers among them, so that
// data already on a grid is found again, and halves between. Wider quant
// ranges need more trials to reach the ranges such data uses.
constexpr int kTrials = 9;
inline int trials(int qmax) { return qmax >= 31 ? 15 : kTrials; }

struct AffineSub {
  float s = 0, m = 0;    // x ~ s * L - m
  float w = 0;           // sum of L^2: weight of s's error
  int down = 0, up = 0;  // the quants may all move down / up this much
};

// Best continuous (s >= 0, m >= 0) with x ~ s * L - m over trial scales.
// The trials map [min x, max x] onto the levels; a positive offset that
// results is taken out by shifting the quants up where they have room (same
// fit, now storable), else the offset is clamped to 0 and s refitted.

void fit_affine_sub(const float* x, int n, int qmax, AffineSub* out) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  *out = AffineSub{};
  if (!(hi > lo)) {  // constant block (or NaN)
    out->s = lo > 0.0f ? lo / float(qmax) : 0.0f;
    out->m = lo > 0.0f ? 0.0f : -lo;
    return;
  }
  float fx = 0, fxx = 0;
  for (int i = 0; i < n; ++i) {
    fx += x[i];
    fxx += x[i] * x[i];
  }
  const double sum_x = fx, sum_xx = fxx;
  double best_err = INFINITY;
  out->s = (hi - std::min(lo, 0.0f)) / float(qmax);
  out->m = -std::min(lo, 0.0f);
  for (int k = 0; k < trials(qmax); ++k) {
    const float levels = float(qmax) + 1.0f - 0.5f * float(k);
    if (!(levels > 0.0f)) break;
    const float iscale = levels / (hi - lo);
    int isl = 0, isll = 0, lmax = 0, lmin = qmax;
    float fxl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = round_clamped((x[i] - lo) * iscale, 0, qmax);
      isl += l;
      isll += l * l;
      lmax = std::max(lmax, l);
      lmin = std::min(lmin, l);
      fxl += x[i] * float(l);
    }
    double sl = isl, sll = isll;
    const double sxl = fxl;
    const double det = n * sll - sl * sl;
    if (!(det > 0)) continue;
    double s = (n * sxl - sl * sum_x) / det;
    double b = (sll * sum_x - sl * sxl) / det;  // offset, x ~ s * L + b
    if (!(s > 0)) continue;
    double err = sum_xx - 2 * s * sxl - 2 * b * sum_x + s * s * sll + 2 * s * b * sl + n * b * b;
    if (b > 0) {
      const double c = std::ceil(b / s);
      if (lmax + c <= qmax) {  // L + c, b - c * s: the same values
        b -= c * s;
        sll += 2 * c * sl + n * c * c;
        lmin += int(c);
        lmax += int(c);
      } else {
        b = 0;
        s = sxl / sll;
        err = sum_xx - 2 * s * sxl + s * s * sll;
      }
    }
    if (err < best_err) {
      best_err = err;
      out->s = float(s);
      out->m = float(-b);
      out->w = float(sll);
      out->down = b > 0 ? 0 : lmin;
      out->up = b > 0 ? 0 : qmax - lmax;
    }
  }
}

// Quants of one sub-block for the stored factors S = d * sc, M = dmin * mn
// (exact float products, as the dequantizer forms them); returns the error.
// (Eight partial sums: n is a multiple of 8, and the loop vectorizes.)
float requant_affine(const float* x, int n, int qmax, float S, float M, uint8_t* L) {
  const float iS = S > 0.0f ? 1.0f / S : 0.0f;
  float acc[8] = {}, lf[32];
  for (int i0 = 0; i0 < n; i0 += 8) {
    for (int k = 0; k < 8; ++k) {
      const float l = round_small(std::min(std::max((x[i0 + k] + M) * iS, 0.0f), float(qmax)));
      lf[i0 + k] = l;
      const float e = S * l - M - x[i0 + k];
      acc[k] += e * e;
    }
  }
  for (int i = 0; i < n; ++i) L[i] = uint8_t(int(lf[i]));
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
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
    if (st->err[j] == 0.0f) continue;
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
    if (best_sc == b->sc[j] && best_mn == b->mn[j]) continue;
    b->sc[j] = uint8_t(best_sc);
    b->mn[j] = uint8_t(best_mn);
    requant_affine(xs, p.sub_len, p.qmax, st->d * float(best_sc), st->dmin * float(best_mn), b->L + j * p.sub_len);
  }
}

// Least-squares (d, dmin) for the current integers; kept if it helps.
bool refit_affine(const float* x, const AffineShape& p, AffineBlock* b, AffineState* st) {
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
  if (!(d > 0)) return false;
  AffineBlock trial = *b;
  AffineState ts = *st;
  ts.d = fp16_to_f32(to_fp16_scale(float(d)));
  ts.dmin = fp16_to_f32(to_fp16_scale(float(e)));
  float before = 0.0f;
  for (int j = 0; j < p.n_sub; ++j) before += st->err[j];
  if (!(requant_all_affine(x, p, &trial, &ts) < before)) return false;
  *b = trial;
  *st = ts;
  return true;
}

// ---------------------------------------------------------------------------
// Symmetric blocks.
// ---------------------------------------------------------------------------

// Best continuous s with x ~ s * L over trial scales mapping the largest
// magnitude to either end of [qmin, qmax].
float fit_symmetric_sub(const float* x, int n, int qmin, int qmax, float* w_out) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  *w_out = 0.0f;
  if (!(amax > 0.0f)) return 0.0f;
  double best_score = -1, best_s = 0;
  for (int side = 0; side < 2; ++side) {
    const float end = side == 0 ? float(qmin) : float(qmax);  // where max goes
    for (int k = 0; k < kTrials; ++k) {
      const float levels = std::fabs(end) + 1.0f - 0.5f * float(k);
      if (!(levels > 0.0f)) break;
      const float iscale = (end < 0 ? -levels : levels) / max;
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
        *w_out = float(sll);
      }
    }
  }
  return float(best_s);
}

float requant_symmetric(const float* x, int n, int qmin, int qmax, float S, int8_t* L) {
  const float iS = S != 0.0f ? 1.0f / S : 0.0f;
  float acc[8] = {}, lf[32];
  for (int i0 = 0; i0 < n; i0 += 8) {
    for (int k = 0; k < 8; ++k) {
      const float l = round_small(std::min(std::max(x[i0 + k] * iS, float(qmin)), float(qmax)));
      lf[i0 + k] = l;
      const float e = S * l - x[i0 + k];
      acc[k] += e * e;
    }
  }
  for (int i = 0; i < n; ++i) L[i] = int8_t(int(lf[i]));
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
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
    if (st->err[j] == 0.0f) continue;
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
    if (best == b->sc[j]) continue;
    b->sc[j] = int8_t(best);
    requant_symmetric(xs, p.sub_len, p.qmin, p.qmax, st->d * float(best), b->L + j * p.sub_len);
  }
}

bool refit_symmetric(const float* x, const SymmetricShape& p, SymmetricBlock* b, SymmetricState* st) {
  double saa = 0, sax = 0;
  for (int j = 0; j < p.n_sub; ++j) {
    for (int i = 0; i < p.sub_len; ++i) {
      const double a = double(b->sc[j]) * b->L[j * p.sub_len + i];
      saa += a * a;
      sax += a * x[j * p.sub_len + i];
    }
  }
  if (!(saa > 0) || !(sax > 0)) return false;
  SymmetricBlock trial = *b;
  SymmetricState ts = *st;
  ts.d = fp16_to_f32(to_fp16_scale(float(sax / saa)));
  float before = 0.0f;
  for (int j = 0; j < p.n_sub; ++j) before += st->err[j];
  if (!(requant_all_symmetric(x, p, &trial, &ts) < before)) return false;
  *b = trial;
  *st = ts;
  return true;
}

// Whether a scale is on the grid of step d, up to float rounding. A grid
// that holds every sub-block's scale wins outright, so that data already in
// the format gets its own grid back.
inline bool on_grid(double e, float d) { return std::fabs(e) <= 2e-3 * double(d); }

// The super-block scale for sub-block scales |s[j]| stored as integers in
// [0, smax]: the largest maps to some k in [3/4 smax, smax], the k whose
// grid d * integer fits all s[j] best (weighted by w[j], how much sub-block
// j's error grows with its scale's error). k = smax is the usual winner; a
// smaller k wins when the scales already sit on a grid (data that came from
// this format).

float choose_super_scale(const float* s, const float* w, int n, int smax, bool* exact = nullptr) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(s[j]));
  if (!(amax > 0.0f)) return 0.0f;
  float best_d = amax / float(smax);
  double best_r = INFINITY;
  int best_hits = -1;
  for (int k = smax; k >= (3 * smax + 3) / 4; --k) {
    const float d = fp16_to_f32(f32_to_fp16(amax / float(k)));
    if (!(d > 0.0f)) continue;
    const float id = 1.0f / d;
    double r = 0;
    int hits = 0;
    for (int j = 0; j < n; ++j) {
      const float q = float(round_clamped(std::fabs(s[j]) * id, 0, smax));
      const double e = double(std::fabs(s[j])) - double(d) * q;
      r += double(w[j]) * e * e;
      hits += on_grid(e, d);
    }
    hits = hits == n;  // all on the grid: the data came from this format
    if (hits > best_hits || (hits == best_hits && r < best_r)) {
      best_hits = hits;
      best_r = r;
      best_d = d;
    }
  }
  if (exact) *exact = best_hits == 1;
  return best_d;
}

// The same choice for the mins, where sub-block j's min may also be
// m[j] + c * s[j] for -down <= c <= up (all quants moved by c: the same
// values), so a block that came from this format finds its grid again.
// Sets shift[j] to the c chosen for the returned scale.
float choose_min_scale(const AffineSub* sub, int n, int smax, bool exact, int shift[16]) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::max(amax, sub[j].m);
  for (int j = 0; j < n; ++j) shift[j] = 0;
  if (!(amax > 0.0f)) return 0.0f;
  // Residual of the mins on the grid of step d. Shifts are tried only for
  // data that looks already quantized, and only while every sub-block so far
  // sits on the grid (the case they are for).
  auto fit = [&](float d, int* c_out, int* hits) {
    const float id = 1.0f / d;
    const float tol = float(2e-3) * d;
    float r = 0.0f;
    *hits = 0;
    for (int j = 0; j < n; ++j) {
      float e0 = sub[j].m - d * float(round_clamped(sub[j].m * id, 0, smax));
      float best = e0 * e0;
      if (c_out) c_out[j] = 0;
      if (exact && std::fabs(e0) > tol && *hits == j) {
        for (int c = -std::min(sub[j].down, 2); c <= std::min(sub[j].up, 2); ++c) {
          const float m = sub[j].m + float(c) * sub[j].s;
          if (c == 0 || m < 0.0f) continue;
          const float e = m - d * float(round_clamped(m * id, 0, smax));
          if (e * e < best) {
            best = e * e;
            if (c_out) c_out[j] = c;
          }
        }
      }
      r += best;
      *hits += best <= tol * tol;
    }
    return double(r);
  };
  float best_d = fp16_to_f32(f32_to_fp16(amax / float(smax)));
  double best_r = INFINITY;
  int best_hits = -1, hits = 0;
  // The largest min maps to k; "largest" with the quants moved up by c,
  // tried only when the scales showed data already in the format.
  for (int c = 0; c <= (exact ? 2 : 0); ++c) {
    float top = 0.0f;
    for (int j = 0; j < n; ++j) top = std::max(top, sub[j].m + float(std::min(c, sub[j].up)) * sub[j].s);
    if (c > 0 && top == amax) break;
    for (int k = smax; k >= (smax + 1) / 2; --k) {
      const float d = fp16_to_f32(f32_to_fp16(top / float(k)));
      if (!(d > 0.0f)) continue;
      const double r = fit(d, nullptr, &hits);
      hits = hits == n;
      if (hits > best_hits || (hits == best_hits && r < best_r)) {
        best_hits = hits;
        best_r = r;
        best_d = d;
      }
    }
  }
  if (best_d > 0.0f) fit(best_d, shift, &hits);
  return best_d;
}

}  // namespace

void fit_affine_superblock(const float* x, const AffineShape& p, AffineBlock* b) {
  AffineSub sub[16];
  float s[16] = {}, m[16] = {}, ws[16] = {};
  int shift[16];
  for (int j = 0; j < p.n_sub; ++j) {
    fit_affine_sub(x + j * p.sub_len, p.sub_len, p.qmax, &sub[j]);
    s[j] = sub[j].s;
    ws[j] = sub[j].w;
  }
  bool exact = false;
  b->d = to_fp16_scale(choose_super_scale(s, ws, p.n_sub, p.smax, &exact));
  b->dmin = to_fp16_scale(choose_min_scale(sub, p.n_sub, p.smax, exact, shift));
  for (int j = 0; j < p.n_sub; ++j) m[j] = sub[j].m + float(shift[j]) * sub[j].s;
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
  local_search_affine(x, p, b, &st);
  refit_affine(x, p, b, &st);
  b->d = f32_to_fp16(st.d);
  b->dmin = f32_to_fp16(st.dmin);
  // Never worse than all zeros (data below fp16's range for d, say).
  float err = 0.0f, zero = 0.0f;
  for (int j = 0; j < p.n_sub; ++j) err += st.err[j];
  for (int i = 0; i < p.n_sub * p.sub_len; ++i) zero += x[i] * x[i];
  if (!(err <= zero)) std::memset(b, 0, sizeof *b);
}

void fit_symmetric_superblock(const float* x, const SymmetricShape& p, SymmetricBlock* b) {
  float s[16], w[16];
  for (int j = 0; j < p.n_sub; ++j) s[j] = fit_symmetric_sub(x + j * p.sub_len, p.sub_len, p.qmin, p.qmax, &w[j]);
  b->d = to_fp16_scale(choose_super_scale(s, w, p.n_sub, p.smax));
  SymmetricState st;
  st.d = fp16_to_f32(b->d);
  const float id = st.d > 0.0f ? 1.0f / st.d : 0.0f;
  for (int j = 0; j < p.n_sub; ++j) b->sc[j] = int8_t(round_clamped(s[j] * id, -p.smax, p.smax));
  requant_all_symmetric(x, p, b, &st);
  local_search_symmetric(x, p, b, &st);
  refit_symmetric(x, p, b, &st);
  b->d = f32_to_fp16(st.d);
  float err = 0.0f, zero = 0.0f;
  for (int j = 0; j < p.n_sub; ++j) err += st.err[j];
  for (int i = 0; i < p.n_sub * p.sub_len; ++i) zero += x[i] * x[i];
  if (!(err <= zero)) std::memset(b, 0, sizeof *b);
}

}  // namespace weir::quant
