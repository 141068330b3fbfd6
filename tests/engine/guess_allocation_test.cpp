// The batcher's guess allocation (engine/guess_allocation.h) against a
// brute force: every way of giving each request 0 .. available guesses,
// scored by the rule's stated rate, (yield + the sum of the guesses'
// chances a^1 .. a^k) / t(tokens + guesses), the best one kept among
// those that give no guess or end the step on the ladder of sizes. The
// rule must find a best one (the same rate) on step costs flat, linear,
// and flat then steep.
#include "engine/guess_allocation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numeric>

namespace weir {
namespace {

double rate(const std::vector<GuessCandidate>& c, const std::vector<int>& k, const GuessStep& s, const StepTimes& t) {
  double e = s.yield;
  size_t n = 0;
  for (size_t r = 0; r < c.size(); ++r) {
    for (int j = 1; j <= k[r]; ++j) e += std::pow(c[r].acceptance, j);
    n += size_t(k[r]);
  }
  return e / t.cost(s.tokens + n);
}

// The best rate over every allocation within room (no forced guesses).
double brute_best(const std::vector<GuessCandidate>& c, const GuessStep& s, const StepTimes& t) {
  std::vector<int> k(c.size(), 0);
  double best = rate(c, k, s, t);
  std::function<void(size_t)> walk = [&](size_t r) {
    if (r == c.size()) {
      const size_t n = size_t(std::accumulate(k.begin(), k.end(), 0));
      if (n <= s.room && (n == 0 || step_size_on_ladder(s.tokens + n))) best = std::max(best, rate(c, k, s, t));
      return;
    }
    for (k[r] = 0; k[r] <= c[r].available; ++k[r]) walk(r + 1);
    k[r] = 0;
  };
  walk(0);
  return best;
}

void expect_best(const std::vector<GuessCandidate>& c, const GuessStep& s, const StepTimes& t, const char* what) {
  const std::vector<int> k = allocate_guesses(c, s, t);
  ASSERT_EQ(k.size(), c.size());
  size_t n = 0;
  for (size_t r = 0; r < c.size(); ++r) {
    EXPECT_GE(k[r], 0) << what;
    EXPECT_LE(k[r], c[r].available) << what;
    n += size_t(k[r]);
  }
  EXPECT_LE(n, s.room) << what;
  EXPECT_NEAR(rate(c, k, s, t), brute_best(c, s, t), 1e-12) << what;
}

const std::vector<GuessCandidate> kRequests = {{0.9, 5}, {0.5, 4}, {0.2, 3}, {0.7, 0}};

TEST(GuessAllocation, TheLadderOfStepSizes) {
  for (size_t T = 1; T <= 8; ++T) EXPECT_TRUE(step_size_on_ladder(T)) << T;
  EXPECT_TRUE(step_size_on_ladder(16));
  EXPECT_FALSE(step_size_on_ladder(9));
  EXPECT_FALSE(step_size_on_ladder(63));
  EXPECT_TRUE(step_size_on_ladder(64));
  EXPECT_FALSE(step_size_on_ladder(72));
  EXPECT_TRUE(step_size_on_ladder(96));
  size_t sizes = 0;
  for (size_t T = 1; T <= 512; ++T) sizes += step_size_on_ladder(T);
  EXPECT_EQ(sizes, 29u);
}

TEST(GuessAllocation, FlatCostTakesEveryGuessThatFits) {
  StepTimes t;
  t.observe(1, 0.01);
  t.observe(64, 0.01);
  const GuessStep s{.tokens = 4, .yield = 4, .room = 100, .draft_min = 0};
  EXPECT_EQ(allocate_guesses(kRequests, s, t), (std::vector<int>{5, 4, 3, 0}));
  expect_best(kRequests, s, t, "flat");
  // Room for 3: the three likeliest (0.9, 0.81, 0.729), all the first request's.
  const GuessStep tight{.tokens = 4, .yield = 4, .room = 3, .draft_min = 0};
  EXPECT_EQ(allocate_guesses(kRequests, tight, t), (std::vector<int>{3, 0, 0, 0}));
  expect_best(kRequests, tight, t, "flat, room 3");
}

TEST(GuessAllocation, LinearCostTakesNone) {
  // Each token costs as much as a generated one: no guess (chance < 1) pays.
  StepTimes t;
  t.observe(1, 0.01);
  t.observe(64, 0.64);
  const GuessStep s{.tokens = 4, .yield = 4, .room = 100, .draft_min = 0};
  EXPECT_EQ(allocate_guesses(kRequests, s, t), (std::vector<int>{0, 0, 0, 0}));
  expect_best(kRequests, s, t, "linear");
}

TEST(GuessAllocation, FlatThenSteepStopsWhereTheCostRises) {
  StepTimes t;
  t.observe(4, 1.0);
  t.observe(8, 1.05);
  t.observe(9, 1.6);
  t.observe(32, 4.0);
  for (size_t tokens : {size_t(4), size_t(6), size_t(13)}) {
    const GuessStep s{.tokens = tokens, .yield = double(tokens), .room = 28, .draft_min = 0};
    expect_best(kRequests, s, t, ("flat then steep, " + std::to_string(tokens)).c_str());
  }
  // 4 tokens and 4 guesses (the likeliest: all the first request's) before the step.
  const GuessStep s{.tokens = 4, .yield = 4, .room = 28, .draft_min = 0};
  EXPECT_EQ(allocate_guesses(kRequests, s, t), (std::vector<int>{4, 0, 0, 0}));
}

TEST(GuessAllocation, DraftMinForcedAndNothingTimed) {
  StepTimes none;
  const GuessStep plain{.tokens = 4, .yield = 4, .room = 100, .draft_min = 0};
  EXPECT_EQ(allocate_guesses(kRequests, plain, none), (std::vector<int>{0, 0, 0, 0}));
  const GuessStep forced{.tokens = 4, .yield = 4, .room = 100, .draft_min = 4};
  EXPECT_EQ(allocate_guesses(kRequests, forced, none), (std::vector<int>{4, 4, 3, 0}));
  const GuessStep forced_tight{.tokens = 4, .yield = 4, .room = 6, .draft_min = 4};
  EXPECT_EQ(allocate_guesses(kRequests, forced_tight, none), (std::vector<int>{4, 2, 0, 0}));
  // Timed and linear: the forced ones, then only a guess likelier than the
  // step's tokens a token: the forced ones brought that down to 8.28 / 15 =
  // 0.55, so the first request's fifth (0.9^5 = 0.59) pays, nothing else.
  StepTimes linear;
  linear.observe(1, 0.01);
  linear.observe(64, 0.64);
  EXPECT_EQ(allocate_guesses(kRequests, forced, linear), (std::vector<int>{5, 4, 3, 0}));
}

// A draft model's steps: one for all requests a guess deep, so a step
// whose deepest request has d guesses costs t + d * draft_step_seconds.
// Flat target steps of 0.01 s: rates worked by hand.
TEST(GuessAllocation, ADraftsStepsCountAGuessDeep) {
  StepTimes flat;
  flat.observe(1, 0.01);
  flat.observe(64, 0.01);
  GuessStep s{.tokens = 4, .yield = 4, .room = 100, .draft_min = 0, .draft_step_seconds = 0.001};
  // All 12 (16 tokens, 5 deep): 8.871 / 0.015 = 591 a second, over 4 / 0.01 = 400.
  EXPECT_EQ(allocate_guesses(kRequests, s, flat), (std::vector<int>{5, 4, 3, 0}));
  s.draft_step_seconds = 0.005;  // a draft step half a target step: 12 give 8.871 / 0.035 = 253
  EXPECT_EQ(allocate_guesses(kRequests, s, flat), (std::vector<int>{0, 0, 0, 0}));
  // One request: free guesses take 4 (8 tokens, the ladder); at 0.002 s a
  // draft step the first pays (4.9 / 0.012 = 408), the second does not (5.71 / 0.014 = 408 - 0.4).
  const std::vector<GuessCandidate> one = {{0.9, 5}};
  s.draft_step_seconds = 0;
  EXPECT_EQ(allocate_guesses(one, s, flat), (std::vector<int>{4}));
  s.draft_step_seconds = 0.002;
  EXPECT_EQ(allocate_guesses(one, s, flat), (std::vector<int>{1}));
}

}  // namespace
}  // namespace weir
