// The token sampler's choices written plainly (candidates sorted by
// probability with std::sort where an order is needed): the reference the
// tests hold weir's TokenSampler (backend/token_sampler.h) and the CUDA
// sample op to. params: temperature, top_k, top_p, min_p, u.
#pragma once
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <vector>

namespace weir::test {

namespace sample_reference_detail {
struct Cand {
  int32_t id;
  float logit;
};
// Probability order: higher logit first, lower id on ties.
inline bool before(const Cand& a, const Cand& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); }

// NaN -> -inf, +inf -> FLT_MAX (as the engine's Sampler).
inline float sanitize(float v) {
  if (!(v <= FLT_MAX)) v = std::isnan(v) ? -INFINITY : FLT_MAX;
  return v;
}

}  // namespace sample_reference_detail

inline int32_t reference_sample_row(const float* logits, int64_t V, const float* params) {
  using namespace sample_reference_detail;
  const float temperature = params[0], top_p = params[2], min_p = params[3], u = params[4];
  const int64_t top_k = int64_t(params[1]);
  if (temperature <= 0) {
    int32_t best = -1;
    float best_l = -INFINITY;
    for (int64_t i = 0; i < V; ++i) {
      const float v = sanitize(logits[i]);
      if (v > best_l) best_l = v, best = int32_t(i);
    }
    return best;
  }
  std::vector<Cand> c(static_cast<size_t>(V));
  float max_l = -INFINITY;
  for (int64_t i = 0; i < V; ++i) {
    c[size_t(i)] = {int32_t(i), sanitize(logits[i])};
    max_l = std::max(max_l, c[size_t(i)].logit);
  }
  if (max_l == -INFINITY) return -1;
  size_t n = size_t(V);
  bool sorted = false;
  if (top_k > 0 && top_k < V) {
    std::partial_sort(c.begin(), c.begin() + top_k, c.end(), before);
    n = size_t(top_k);
    sorted = true;
  }
  const bool use_top_p = top_p < 1.0f;
  double norm = 0;
  if (use_top_p)
    for (size_t i = 0; i < n; ++i) norm += double(std::exp(c[i].logit - max_l));
  if (min_p > 0) {  // p_i >= min_p * p_max  <=>  logit_i >= max + log(min_p)
    const float thr = max_l + std::log(min_p);
    size_t m = 0;  // a stable compaction keeps either order
    for (size_t i = 0; i < n; ++i)
      if (c[i].logit >= thr) c[m++] = c[i];
    n = m;
  }
  if (use_top_p) {
    if (!sorted) std::sort(c.begin(), c.begin() + std::ptrdiff_t(n), before);
    sorted = true;
    double cum = 0;
    for (size_t i = 0; i < n; ++i) {
      cum += double(std::exp(c[i].logit - max_l)) / norm;
      if (cum >= top_p) {
        n = i + 1;
        break;
      }
    }
  }
  std::vector<float> w(n);
  const float inv_t = 1.0f / temperature;
  double sum = 0;
  for (size_t i = 0; i < n; ++i)
    sum += double(w[i] = temperature == 1.0f ? std::exp(c[i].logit - max_l) : std::exp((c[i].logit - max_l) * inv_t));
  const double target = double(u) * sum;
  double cum = 0;
  size_t last = 0;
  for (size_t i = 0; i < n; ++i) {
    if (w[i] <= 0) continue;
    cum += double(w[i]);
    last = i;
    if (target < cum) return c[i].id;
  }
  return c[last].id;  // rounding left the draw at the very end
}


}  // namespace weir::test
