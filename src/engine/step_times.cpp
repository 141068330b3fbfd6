#include "engine/step_times.h"

#include <iterator>

namespace weir {

void StepTimes::observe(size_t tokens, double seconds) {
  if (tokens == 0 || !(seconds > 0)) return;
  auto [it, fresh] = mean_.try_emplace(tokens, seconds);
  if (!fresh) it->second = decay_ * it->second + (1 - decay_) * seconds;
}

double StepTimes::cost(size_t tokens) const {
  if (mean_.empty()) return 0;
  const auto above = mean_.lower_bound(tokens);  // first timed T >= tokens
  if (above != mean_.end() && above->first == tokens) return above->second;
  if (above == mean_.begin()) return above->second * double(tokens) / double(above->first);  // below every timed T
  const auto below = std::prev(above);
  const double t0 = below->second, T0 = double(below->first);
  if (above == mean_.end()) return t0 * (1 + kExploreSlope * (double(tokens) - T0) / T0);
  const double t1 = above->second, T1 = double(above->first);
  return t0 + (t1 - t0) * (double(tokens) - T0) / (T1 - T0);
}

}  // namespace weir
