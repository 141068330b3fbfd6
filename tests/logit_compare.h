// Comparing two runs' logits, as the model tests do: the top token and its
// margin over the second, and KL(ref || got) over ref's 50 most likely
// tokens.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace weir::test {

struct Margin {
  int32_t top1;
  float margin;  // top-1 logit minus top-2
};

inline Margin top_two(const float* l, int64_t n) {
  int32_t a = 0;
  for (int64_t i = 1; i < n; ++i)
    if (l[i] > l[a]) a = int32_t(i);
  float second = -INFINITY;
  for (int64_t i = 0; i < n; ++i)
    if (i != a) second = std::max(second, l[i]);
  return {a, l[a] - second};
}

// A logit row against a reference row: max_i |got_i - want_i| / max_i
// |want_i|; infinite when got holds a NaN or an infinity.
inline double row_rel_error(const float* got, const std::vector<double>& want) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    diff = std::max(diff, std::fabs(double(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return diff / scale;
}

inline std::vector<double> softmax(const float* l, int64_t n) {
  const float mx = *std::max_element(l, l + n);
  std::vector<double> p(static_cast<size_t>(n));
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += p[size_t(i)] = std::exp(double(l[i] - mx));
  for (double& v : p) v /= s;
  return p;
}

// KL(ref || got) over ref's 50 most likely tokens.
inline double kl_top50(const float* ref, const float* got, int64_t n) {
  const auto p = softmax(ref, n), q = softmax(got, n);
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[size_t(i)] = i;
  const size_t k = std::min<size_t>(50, size_t(n));
  std::partial_sort(idx.begin(), idx.begin() + std::ptrdiff_t(k), idx.end(),
                    [&](int64_t a, int64_t b) { return p[size_t(a)] > p[size_t(b)]; });
  double kl = 0;
  for (size_t i = 0; i < k; ++i) {
    const double pi = p[size_t(idx[i])], qi = std::max(q[size_t(idx[i])], 1e-30);
    kl += pi * std::log(pi / qi);
  }
  return kl;
}

}  // namespace weir::test
