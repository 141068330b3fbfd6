#include "engine/host_sampling.h"

#include <algorithm>
#include <cmath>

#include "backend/token_sampler.h"

namespace weir {

HostSample sample_on_host(std::span<float> logits, const HostSampling& s,
                          const std::unordered_map<int32_t, int>& counts) {
  const int64_t V = int64_t(logits.size());
  for (const auto& [id, c] : counts)
    if (id >= 0 && id < V && c > 0) logits[size_t(id)] -= s.presence_penalty + s.frequency_penalty * float(c);
  const float params[5] = {s.temperature, float(s.top_k), s.top_p, s.min_p, s.u};
  HostSample out;
  out.id = sample_row(logits.data(), V, params);
  if (out.id < 0 || s.top_n < 0) return out;
  // log-softmax: logit - max - log(sum exp(logit - max)), NaN as -inf.
  float mx = -INFINITY;
  for (float x : logits)
    if (x > mx) mx = x;
  double sum = 0;
  for (float x : logits)
    if (x > -INFINITY) sum += std::exp(double(x) - double(mx));
  const double lse = double(mx) + std::log(sum);
  auto lp = [&](int32_t id) {
    const float x = logits[size_t(id)];
    return std::isnan(x) ? -INFINITY : float(double(x) - lse);
  };
  out.logprob = lp(out.id);
  if (s.top_n == 0) return out;
  const size_t n = std::min<size_t>(size_t(s.top_n), size_t(V));
  std::vector<int32_t> ids(static_cast<size_t>(V));
  for (int32_t i = 0; i < V; ++i) ids[size_t(i)] = i;
  auto better = [&](int32_t a, int32_t b) {
    const float x = std::isnan(logits[size_t(a)]) ? -INFINITY : logits[size_t(a)];
    const float y = std::isnan(logits[size_t(b)]) ? -INFINITY : logits[size_t(b)];
    return x != y ? x > y : a < b;
  };
  std::partial_sort(ids.begin(), ids.begin() + std::ptrdiff_t(n), ids.end(), better);
  for (size_t k = 0; k < n; ++k) out.top.push_back({ids[k], lp(ids[k])});
  return out;
}

}  // namespace weir
