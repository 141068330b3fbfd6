#include "engine/guess_allocation.h"

#include <algorithm>
#include <cmath>

namespace weir {

bool step_size_on_ladder(size_t T) { return T <= 8 || (T <= 64 ? T % 8 == 0 : T % 32 == 0); }

std::vector<int> allocate_guesses(std::span<const GuessCandidate> candidates, const GuessStep& step,
                                  const StepTimes& times) {
  std::vector<int> k(candidates.size(), 0);
  size_t room = step.room;
  double yield = step.yield;
  size_t tokens = step.tokens;
  int depth = 0;  // the most guesses of one request: the proposer's steps
  // The forced ones first.
  for (size_t r = 0; r < candidates.size() && step.draft_min > 0; ++r) {
    const int n = int(std::min<size_t>(size_t(std::min(step.draft_min, candidates[r].available)), room));
    for (int j = 0; j < n; ++j) yield += std::pow(candidates[r].acceptance, j + 1);
    k[r] = n, room -= size_t(n), tokens += size_t(n);
    depth = std::max(depth, n);
  }
  if (times.empty() || room == 0) return k;
  // Every further guess by its chance of being kept, highest first; within
  // a request the chances fall, so its guesses stay in order (ties: by
  // request, then position).
  struct Guess {
    double chance;
    size_t request;
  };
  std::vector<Guess> order;
  for (size_t r = 0; r < candidates.size(); ++r) {
    const double a = std::clamp(candidates[r].acceptance, 0.0, 1.0);
    double chance = std::pow(a, k[r] + 1);
    for (int j = k[r]; j < candidates[r].available; ++j, chance *= a) order.push_back({chance, r});
  }
  std::stable_sort(order.begin(), order.end(), [](const Guess& x, const Guess& y) { return x.chance > y.chance; });
  // The prefix that makes the most tokens a second (ties: the shorter),
  // among those that end the step on the ladder.
  const size_t most = std::min(order.size(), room);
  auto cost = [&](size_t n, int deep) { return times.cost(tokens + n) + deep * step.draft_step_seconds; };
  double best_rate = yield / cost(0, depth), gained = 0;
  size_t best = 0;
  std::vector<int> taken = k;
  for (size_t n = 1; n <= most; ++n) {
    gained += order[n - 1].chance;
    depth = std::max(depth, ++taken[order[n - 1].request]);
    if (!step_size_on_ladder(tokens + n)) continue;
    const double rate = (yield + gained) / cost(n, depth);
    if (rate > best_rate) best_rate = rate, best = n;
  }
  for (size_t n = 0; n < best; ++n) ++k[order[n].request];
  return k;
}

}  // namespace weir
