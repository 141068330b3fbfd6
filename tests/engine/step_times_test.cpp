// The batcher's step-time table (engine/step_times.h): timed sizes as
// their decayed means, the sizes between them on the line through their
// neighbours, below every timed size in proportion to the smallest, above as the largest
// grown by kExploreSlope a doubling, all computed here by hand.
#include "engine/step_times.h"

#include <gtest/gtest.h>

namespace weir {
namespace {

TEST(StepTimes, NothingTimedCostsZero) {
  StepTimes t;
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.cost(1), 0.0);
  t.observe(0, 1.0);   // no tokens: ignored
  t.observe(4, 0.0);   // no time: ignored
  t.observe(4, -1.0);
  EXPECT_TRUE(t.empty());
}

TEST(StepTimes, DecayedMeanOfATimedSize) {
  StepTimes t(0.5);
  t.observe(8, 1.0);
  EXPECT_DOUBLE_EQ(t.cost(8), 1.0);
  t.observe(8, 3.0);
  EXPECT_DOUBLE_EQ(t.cost(8), 0.5 * 1.0 + 0.5 * 3.0);
  t.observe(8, 4.0);
  EXPECT_DOUBLE_EQ(t.cost(8), 0.5 * 2.0 + 0.5 * 4.0);
}

TEST(StepTimes, BetweenBelowAndAboveTheTimedSizes) {
  StepTimes t;
  t.observe(10, 2.0);
  t.observe(20, 4.0);
  t.observe(40, 5.0);
  EXPECT_DOUBLE_EQ(t.cost(15), 3.0);
  EXPECT_DOUBLE_EQ(t.cost(30), 4.5);
  EXPECT_DOUBLE_EQ(t.cost(5), 1.0);   // below: in proportion to the smallest timed
  EXPECT_DOUBLE_EQ(t.cost(80), 5.0 * (1 + StepTimes::kExploreSlope));  // one doubling above the largest
  EXPECT_DOUBLE_EQ(t.cost(60), 5.0 * (1 + StepTimes::kExploreSlope * 0.5));
}

}  // namespace
}  // namespace weir
