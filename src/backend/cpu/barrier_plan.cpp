#include "backend/cpu/barrier_plan.h"

namespace weir::cpu {
namespace {

bool any_overlap(const std::vector<MemRange>& a, const std::vector<MemRange>& b) {
  for (const MemRange& x : a)
    for (const MemRange& y : b)
      if (x.overlaps(y)) return true;
  return false;
}

}  // namespace

std::vector<bool> plan_barriers(const std::vector<Stage>& stages) {
  std::vector<bool> barrier(stages.size(), false);
  // What the stages since the last barrier read and wrote (a few ranges per
  // stage, a few stages per epoch: quadratic scans are cheap here).
  std::vector<MemRange> reads, writes;
  for (size_t s = 0; s < stages.size(); ++s) {
    const Stage& st = stages[s];
    const bool need = s > 0 && (any_overlap(st.reads, writes) || any_overlap(st.writes, writes) ||
                                any_overlap(st.writes, reads));
    if (need) {
      barrier[s] = true;
      reads.clear();
      writes.clear();
    }
    reads.insert(reads.end(), st.reads.begin(), st.reads.end());
    writes.insert(writes.end(), st.writes.begin(), st.writes.end());
  }
  return barrier;
}

}  // namespace weir::cpu
