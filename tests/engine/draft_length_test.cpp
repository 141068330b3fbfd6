// The adaptive draft length's rule (engine/draft_length.h) against its
// stated formula, computed here by hand.
#include "engine/draft_length.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"

namespace weir {
namespace {

TEST(DraftLength, ExpectedTokensIsTheGeometricSum) {
  // a = 0.5, k = 3: 1 + 0.5 + 0.25 + 0.125.
  EXPECT_DOUBLE_EQ(DraftLength::expected_tokens(0.5, 3), 1.875);
  EXPECT_DOUBLE_EQ(DraftLength::expected_tokens(0.0, 5), 1.0);
  EXPECT_DOUBLE_EQ(DraftLength::expected_tokens(1.0, 4), 5.0);
  EXPECT_DOUBLE_EQ(DraftLength::expected_tokens(0.9, 0), 1.0);
}

TEST(DraftLength, PlainFirstUntilPlainDecodingIsTimed) {
  DraftLength r;
  EXPECT_EQ(r.next(), 0);
  DraftLength forced({.draft_min = 2, .draft_max = 8});
  EXPECT_EQ(forced.next(), 2);
}

TEST(DraftLength, AcceptanceCountsKeptGuessesAndTheRefusalThatEndedThem) {
  DraftLength r({.draft_min = 0, .draft_max = 16, .prior_acceptance = 0.5, .decay = 1.0});
  EXPECT_DOUBLE_EQ(r.acceptance(), 0.5);
  r.observe(5, 2);  // 2 kept, the third refused: 3 trials
  EXPECT_DOUBLE_EQ(r.acceptance(), (2 + 4 * 0.5) / (3 + 4));
  r.observe(4, 4);  // all kept: 4 trials
  EXPECT_DOUBLE_EQ(r.acceptance(), (6 + 2.0) / (7 + 4));
}

TEST(DraftLength, PicksTheLengthThatMakesTheMostTokensASecond) {
  DraftLength r({.draft_min = 0, .draft_max = 6, .prior_acceptance = 0.5, .decay = 1.0});
  // Costs: flat to 3 guesses, then steep (a GPU's tile steps).
  const double t[7] = {1.0, 1.02, 1.04, 1.06, 2.0, 2.1, 2.2};
  for (int k = 0; k <= 6; ++k) r.observe_step(k, t[k]);
  for (int i = 0; i < 200; ++i) r.observe(4, 4);  // acceptance ~0.99+
  int best = 0;
  double best_g = 1;
  for (int k = 1; k <= 6; ++k) {
    const double g = DraftLength::expected_tokens(r.acceptance(), k) / t[k];
    if (g > best_g) best = k, best_g = g;
  }
  EXPECT_EQ(r.next(), best);
  EXPECT_EQ(best, 3);  // E(3) ~ 4 tokens for 1.06 beats E(6) ~ 7 for 2.2
  EXPECT_NEAR(r.speedup(3), DraftLength::expected_tokens(r.acceptance(), 3) / 1.06, 1e-12);
}

TEST(DraftLength, BacksOffWhenGuessesAreRefused) {
  DraftLength r({.draft_min = 0, .draft_max = 16, .prior_acceptance = 0.5, .decay = 0.95});
  r.observe_step(0, 1.0);
  for (int k = 1; k <= 16; ++k) r.observe_step(k, 1.0 + 0.1 * k);
  EXPECT_GT(r.next(), 0);  // prior 0.5: 1 guess costs 1.1 for 1.5 tokens
  for (int i = 0; i < 100; ++i) r.observe(3, 0);
  EXPECT_LT(r.acceptance(), 0.1);  // the prior stays worth 4 of the ~20 decayed trials
  EXPECT_EQ(r.next(), 0);
  // draft_min keeps a floor.
  DraftLength m({.draft_min = 2, .draft_max = 16, .prior_acceptance = 0.5, .decay = 0.95});
  m.observe_step(0, 1.0);
  for (int i = 0; i < 100; ++i) m.observe(3, 0);
  EXPECT_EQ(m.next(), 2);
}

TEST(DraftLength, DraftTimeCountsAgainstLongDrafts) {
  DraftLength r({.draft_min = 0, .draft_max = 8, .prior_acceptance = 0.8, .decay = 1.0});
  for (int k = 0; k <= 8; ++k) r.observe_step(k, 1.0);  // verify free up to 8
  EXPECT_EQ(r.next(), 8);
  r.observe_draft(10, 5.0);  // a guess costs half a target step
  const double a = r.acceptance();
  int best = 0;
  double best_g = 1;
  for (int k = 1; k <= 8; ++k) {
    const double g = DraftLength::expected_tokens(a, k) / (1.0 + 0.5 * k);
    if (g > best_g) best = k, best_g = g;
  }
  EXPECT_EQ(r.next(), best);
  EXPECT_LT(best, 8);
}

TEST(DraftLength, UntimedLengthsFollowTheSlopeBelowThem) {
  DraftLength r;
  r.observe_step(0, 2.0);
  EXPECT_DOUBLE_EQ(r.step_cost(1), 2.0 + 0.02 * 2.0);  // nothing timed above 0: 2% of t(0) a token
  r.observe_step(2, 3.0);
  EXPECT_DOUBLE_EQ(r.step_cost(1), 2.0 + 0.02 * 2.0);
  EXPECT_DOUBLE_EQ(r.step_cost(5), 3.0 + 3 * 0.5);  // (3 - 2) / 2 a token from 2 on
  r.observe_step(4, 3.02);
  EXPECT_DOUBLE_EQ(r.step_cost(6), 3.02 + 2 * 0.04);  // flat from 2 to 4: the 2% floor
}

TEST(DraftLength, TheCostOfLeavingThePipelineCounts) {
  DraftLength r({.draft_min = 0, .draft_max = 4, .prior_acceptance = 0.5, .decay = 1.0});
  for (int k = 0; k <= 4; ++k) r.observe_step(k, 1.0);
  for (int i = 0; i < 10; ++i) r.observe(2, 1);  // a = (10 + 2) / (20 + 4) = 0.5
  EXPECT_EQ(r.next(), 4);                       // E(4) = 1.9375 for 1.0
  r.observe_overhead(1.0);
  const double a = r.acceptance();
  EXPECT_NEAR(r.speedup(4), DraftLength::expected_tokens(a, 4) / 2.0, 1e-12);
  EXPECT_EQ(r.next(), 0);  // 1.94 tokens for 2.0: below plain decoding's 1 for 1 (and its 3% margin)
  EXPECT_DOUBLE_EQ(r.speedup(0), 1.0);  // plain decoding pays no overhead
}

TEST(DraftLength, RefusesOutOfRangeLengths) {
  EXPECT_THROW(DraftLength({.draft_min = 0, .draft_max = 0}), Error);
  EXPECT_THROW(DraftLength({.draft_min = 0, .draft_max = DraftLength::kMaxDraft + 1}), Error);
  EXPECT_THROW(DraftLength({.draft_min = 5, .draft_max = 4}), Error);
  EXPECT_THROW(DraftLength({.draft_min = -1, .draft_max = 4}), Error);
}

}  // namespace
}  // namespace weir
