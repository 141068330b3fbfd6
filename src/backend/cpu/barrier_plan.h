// Which barriers a graph run needs. The executor runs every node on all
// threads; a thread may start the next node while others finish this one,
// unless a barrier sits between them. One is needed before a stage that
// reads memory written since the last barrier (the data must be complete),
// or writes memory read or written since then (another thread may still be
// reading the old contents: the planner reuses activation memory). Stages
// that touch disjoint memory, such as the q, k and v products of one
// attention block, then share a barrier: fewer waits per token, which is
// what an oversubscribed machine pays for most.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace weir::cpu {

struct MemRange {
  uintptr_t begin = 0, end = 0;  // [begin, end)
  bool overlaps(const MemRange& o) const { return begin < o.end && o.begin < end; }
};

struct Stage {
  std::vector<MemRange> reads, writes;
};

// barrier[s]: whether threads must meet before stage s (never before the
// first: the job's start is one).
std::vector<bool> plan_barriers(const std::vector<Stage>& stages);

}  // namespace weir::cpu
