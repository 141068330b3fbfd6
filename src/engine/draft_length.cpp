#include "engine/draft_length.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace weir {

namespace {
constexpr double kPriorWeight = 4;       // guesses the prior acceptance is worth
constexpr double kOptimisticSlope = 0.02;  // t(0) a token for k not timed yet
constexpr double kMinGain = 1.03;          // guesses must promise 3% more tokens a second
}  // namespace

DraftLength::DraftLength(DraftLengthOptions o) : o_(o), time_(size_t(kMaxDraft) + 1, 0.0) {
  if (o_.draft_max < 1 || o_.draft_max > kMaxDraft)
    throw Error("--draft-max: expected 1 .. " + std::to_string(kMaxDraft) + ", got " + std::to_string(o_.draft_max));
  if (o_.draft_min < 0 || o_.draft_min > o_.draft_max)
    throw Error("--draft-min: expected 0 .. --draft-max (" + std::to_string(o_.draft_max) + "), got " +
                std::to_string(o_.draft_min));
  if (!(o_.prior_acceptance > 0 && o_.prior_acceptance < 1)) throw Error("draft length: prior acceptance outside (0, 1)");
  if (!(o_.decay > 0 && o_.decay <= 1)) throw Error("draft length: decay outside (0, 1]");
}

double DraftLength::acceptance() const {
  return (kept_ + kPriorWeight * o_.prior_acceptance) / (checked_ + kPriorWeight);
}

void DraftLength::observe(int proposed, int accepted) {
  if (proposed <= 0) return;
  accepted = std::clamp(accepted, 0, proposed);
  // Trials: every kept guess, and the refused one (if any) that ended them.
  const int trials = accepted + (accepted < proposed ? 1 : 0);
  for (int i = 0; i < trials; ++i) {
    kept_ *= o_.decay;
    checked_ *= o_.decay;
  }
  kept_ += accepted;
  checked_ += trials;
}

void DraftLength::observe_step(int k, double seconds) {
  if (k < 0 || k > kMaxDraft || !(seconds > 0)) return;
  double& t = time_[size_t(k)];
  t = t == 0 ? seconds : o_.decay * t + (1 - o_.decay) * seconds;
}

void DraftLength::observe_draft(int tokens, double seconds) {
  if (tokens <= 0 || !(seconds >= 0)) return;
  draft_seconds_ = o_.decay * draft_seconds_ + seconds;
  draft_tokens_ = o_.decay * draft_tokens_ + tokens;
}

void DraftLength::observe_overhead(double seconds) {
  if (!(seconds >= 0)) return;
  overhead_ = overhead_seen_ ? o_.decay * overhead_ + (1 - o_.decay) * seconds : seconds;
  overhead_seen_ = true;
}

double DraftLength::step_cost(int k) const {
  const double t0 = time_[0];
  if (k <= 0 || t0 == 0) return t0;
  k = std::min(k, kMaxDraft);
  if (time_[size_t(k)] > 0) return time_[size_t(k)];
  int below = k - 1;
  while (below > 0 && time_[size_t(below)] == 0) --below;
  // The slope a token between the two timed lengths below (0 and `below`
  // at least), or the optimistic one where it is smaller.
  double slope = kOptimisticSlope * t0;
  if (below > 0) {
    int prev = below - 1;
    while (prev > 0 && time_[size_t(prev)] == 0) --prev;
    slope = std::max(slope, (time_[size_t(below)] - time_[size_t(prev)]) / (below - prev));
  }
  return time_[size_t(below)] + (k - below) * slope;
}

double DraftLength::expected_tokens(double a, int k) {
  if (k <= 0) return 1;
  if (a >= 1) return k + 1;
  return (1 - std::pow(a, k + 1)) / (1 - a);
}

double DraftLength::speedup(int k) const {
  const double t0 = time_[0];
  if (t0 == 0) return k == 0 ? 1 : expected_tokens(acceptance(), k);  // nothing timed: tokens a step
  const double d = draft_tokens_ > 0 ? draft_seconds_ / draft_tokens_ : 0;
  return expected_tokens(acceptance(), k) * t0 / (step_cost(k) + k * d + (k > 0 ? overhead_ : 0));
}

int DraftLength::next() const {
  if (time_[0] == 0) return o_.draft_min;  // plain decoding's cost first: the yardstick
  int best = 0;
  double best_gain = kMinGain;  // plain decoding, and a margin for the estimates' noise
  for (int k = std::max(1, o_.draft_min); k <= o_.draft_max; ++k) {
    const double g = speedup(k);
    if (g > best_gain || (best == 0 && o_.draft_min > 0)) best = k, best_gain = g;
  }
  return best;
}

}  // namespace weir
