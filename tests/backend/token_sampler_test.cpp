// The token sampler (the one CPU implementation: the sample op, the engine's
// Sampler and the batcher's host sampling run it) against the plain
// reference (tests/sample_reference.h) on random rows: every filter
// setting, ties, NaN and infinite logits, draws across the whole [0, 1).
#include "backend/token_sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "sample_reference.h"

namespace weir {
namespace {

TEST(TokenSampler, ChoosesAsThePlainReference) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  TokenSampler s;
  int checked = 0;
  for (int row = 0; row < 3000; ++row) {
    const int64_t V = 1 + int64_t(rng() % 600);
    std::vector<float> logits(static_cast<size_t>(V));
    const bool coarse = row % 3 == 0;  // many exact ties
    for (float& x : logits) x = coarse ? float(int(rng() % 7)) : std::normal_distribution<float>(0, 3)(rng);
    if (row % 11 == 0) logits[rng() % V] = std::numeric_limits<float>::quiet_NaN();
    if (row % 13 == 0) logits[rng() % V] = std::numeric_limits<float>::infinity();
    if (row % 17 == 0) logits[rng() % V] = -std::numeric_limits<float>::infinity();
    const float params[5] = {row % 10 == 0 ? 0.0f : 0.2f + 2 * unit(rng), float(int(rng() % 5) == 0 ? 0 : rng() % 80),
                             row % 4 == 0 ? 1.0f : 0.05f + 0.95f * unit(rng), row % 5 == 0 ? 0.0f : 0.3f * unit(rng),
                             std::min(unit(rng), 0x1.fffffep-1f)};
    SamplingParams p;
    p.temperature = params[0];
    p.top_k = int(params[1]);
    p.top_p = params[2];
    p.min_p = params[3];
    const int32_t want = test::reference_sample_row(logits.data(), V, params);
    ASSERT_EQ(s.sample(logits.data(), V, p, double(params[4])), want) << "row " << row << " V " << V;
    ASSERT_EQ(sample_row(logits.data(), V, params), want) << "row " << row;
    ++checked;
  }
  EXPECT_EQ(checked, 3000);
}

TEST(TokenSampler, NoFiniteLogitGivesMinusOne) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), ninf = -std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {nan, ninf, nan};
  const float greedy[5] = {0, 0, 1, 0, 0.5f}, sampled[5] = {1, 0, 1, 0, 0.5f};
  EXPECT_EQ(sample_row(logits.data(), 3, greedy), -1);
  EXPECT_EQ(sample_row(logits.data(), 3, sampled), -1);
}

}  // namespace
}  // namespace weir
