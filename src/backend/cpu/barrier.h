// The meeting point of a pool's threads between the steps of a job. Threads
// come in groups (NUMA nodes; one group by default): a thread arrives at its
// group's counter, the last of a group arrives at the counter across groups,
// and the last of those releases everyone by bumping each group's phase
// word, which that group's threads wait on. So the contended counters and
// the words polled stay within a group's memory, and only one thread per
// group crosses over. Waiting is spin_wait.h's: spin, then sleep.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cpu/spin_wait.h"

namespace weir::cpu {

class Barrier {
 public:
  // group_of_thread[i]: the group of thread i, numbered 0..G-1 (every group
  // used); empty: n_threads threads in one group.
  Barrier(int n_threads, std::vector<int> group_of_thread);

  int n_groups() const { return int(groups_.size()); }
  // Thread ith arrives and waits for the others. budget null: spin only.
  void arrive_and_wait(int ith, SpinBudget* budget);

 private:
  struct alignas(64) Group {
    std::atomic<uint32_t> arrived{0};
    uint32_t size = 0;
    alignas(64) std::atomic<uint32_t> phase{0};  // polled; its own cache line
    std::atomic<uint32_t> sleepers{0};
  };
  std::vector<int> group_of_;
  std::unique_ptr<Group[]> groups_storage_;
  std::vector<Group*> groups_;
  alignas(64) std::atomic<uint32_t> top_arrived_{0};
};

}  // namespace weir::cpu
