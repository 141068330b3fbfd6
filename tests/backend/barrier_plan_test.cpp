// plan_barriers against hand-worked stage lists: a barrier exactly where a
// stage reads what an earlier stage of the same epoch wrote (RAW), or writes
// what one read or wrote (WAR, WAW).
#include "backend/cpu/barrier_plan.h"

#include <gtest/gtest.h>

namespace weir::cpu {
namespace {

MemRange R(uintptr_t b, uintptr_t e) { return {b, e}; }

TEST(BarrierPlan, OnlyHazardsNeedBarriers) {
  // 0: x -> a;  1: x -> b (independent of 0);  2: a, b -> c (reads 0's and 1's
  // writes: barrier);  3: reads c (barrier);  4: writes x, which 3 did not
  // read but 0 and 1 did in an earlier epoch: no barrier;  5: writes d where
  // 4 reads nothing but 3 read c... d overlaps c: WAR with 3: barrier.
  const MemRange x = R(0, 100), a = R(100, 200), b = R(200, 300), c = R(300, 400);
  std::vector<Stage> s = {
      {{x}, {a}}, {{x}, {b}}, {{a, b}, {c}}, {{c}, {R(1000, 1100)}}, {{}, {x}}, {{}, {R(350, 360)}},
  };
  EXPECT_EQ(plan_barriers(s), (std::vector<bool>{false, false, true, true, false, true}));
}

TEST(BarrierPlan, WriteAfterWriteAndAdjacentRanges) {
  std::vector<Stage> s = {
      {{}, {R(0, 64)}},
      {{}, {R(64, 128)}},   // adjacent, not overlapping: no barrier
      {{}, {R(100, 110)}},  // overwrites stage 1's output: barrier
      {{R(0, 64)}, {}},     // reads stage 0's output, written before the last barrier: none
  };
  EXPECT_EQ(plan_barriers(s), (std::vector<bool>{false, false, true, false}));
}

TEST(BarrierPlan, FirstStageNeverWaits) {
  EXPECT_EQ(plan_barriers({{{R(0, 8)}, {R(0, 8)}}}), std::vector<bool>{false});
  EXPECT_TRUE(plan_barriers({}).empty());
}

}  // namespace
}  // namespace weir::cpu
