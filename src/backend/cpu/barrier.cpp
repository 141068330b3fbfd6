#include "backend/cpu/barrier.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace weir::cpu {

Barrier::Barrier(int n_threads, std::vector<int> group_of_thread) : group_of_(std::move(group_of_thread)) {
  if (group_of_.empty()) group_of_.assign(size_t(n_threads), 0);
  if (int(group_of_.size()) != n_threads)
    throw Error("thread pool: " + std::to_string(group_of_.size()) + " group numbers for " +
                std::to_string(n_threads) + " threads");
  const int n_groups = 1 + *std::max_element(group_of_.begin(), group_of_.end());
  groups_storage_ = std::make_unique<Group[]>(size_t(n_groups));
  for (int g = 0; g < n_groups; ++g) groups_.push_back(&groups_storage_[size_t(g)]);
  for (int g : group_of_) {
    if (g < 0) throw Error("thread pool: negative group number " + std::to_string(g));
    ++groups_[size_t(g)]->size;
  }
  for (int g = 0; g < n_groups; ++g)
    if (groups_[size_t(g)]->size == 0)
      throw Error("thread pool: group " + std::to_string(g) + " has no threads (groups are numbered 0.." +
                  std::to_string(n_groups - 1) + ")");
}

void Barrier::arrive_and_wait(int ith, SpinBudget* budget) {
  Group& g = *groups_[size_t(group_of_[size_t(ith)])];
  // Read before arriving: the phase cannot move on until this thread arrives.
  const uint32_t phase = g.phase.load(std::memory_order_acquire);
  if (g.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 < g.size)
    return wait_while_equal(g.phase, phase, g.sleepers, budget);
  // Last of the group: no one here arrives again before the release below.
  g.arrived.store(0, std::memory_order_relaxed);
  const uint32_t n_groups = uint32_t(groups_.size());
  if (n_groups > 1) {
    if (top_arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 < n_groups)
      return wait_while_equal(g.phase, phase, g.sleepers, budget);
    top_arrived_.store(0, std::memory_order_relaxed);
  }
  for (Group* h : groups_) bump_and_wake(h->phase, h->sleepers);
}

}  // namespace weir::cpu
