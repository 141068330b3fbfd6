// A persistent pool of worker threads that run one parallel job at a time.
// The caller's thread is thread 0, so a pool of n threads starts n-1.
// Between jobs, workers wait for the next one (spin_wait.h: spin for an
// adaptive budget, then sleep, so idle workers use no CPU); within a job,
// threads share loops through chunk_cursor() (chunk_counter.h) and wait for
// each other's chunks at sync(), or meet at barrier() (barrier.h: per group,
// then across groups).
#pragma once
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/cpu/barrier.h"
#include "backend/cpu/chunk_counter.h"
#include "backend/cpu/spin_wait.h"
#include "core/thread_group.h"

namespace weir::cpu {

class ThreadPool {
 public:
  // group_of_thread: see Barrier (e.g. the NUMA node of each thread); empty:
  // one group. Starts all n - 1 workers or none (ThreadStartError). Barrier waits spin without sleeping when WEIR_BARRIER=spin.
  explicit ThreadPool(int n_threads, std::vector<int> group_of_thread = {});
  ThreadPool(int n_threads, std::vector<int> group_of_thread, WaitMode mode);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_; }
  int n_groups() const { return barrier_.n_groups(); }
  // Runs job(ith) on every thread (ith = 0 on the caller) and returns when all
  // are done. Exceptions from job are rethrown on the caller (the first one).
  // Not reentrant: one job at a time, from one caller thread at a time.
  void run(const std::function<void(int ith)>& job);
  // All threads of the current job meet here; every thread must call it the
  // same number of times. barrier() finds ith from the calling thread.
  void barrier(int ith);
  void barrier();
  // Waits until every chunk of every loop (for_each_chunk) this thread has
  // passed in the job is finished, by whichever threads took them: what a
  // barrier between loops is for, without waiting for threads that hold no
  // such chunk (on an oversubscribed machine, the descheduled ones). Work
  // outside chunked loops is not covered. With thread groups (NUMA: kernels
  // split rows by thread, not by chunk) and with WEIR_BARRIER=spin, a barrier.
  void sync(int ith);
  // Thread ith's handle on the shared loop counter, valid during a job.
  ChunkCursor* chunk_cursor(int ith) { return &state_[size_t(ith)].cursor; }

  // For tests and benchmarks: thread ith's barrier spin budget.
  const SpinBudget& barrier_budget(int ith) const { return state_[size_t(ith)].barrier; }
  // The kernel thread ids of the workers (threads 1..n-1).
  std::vector<int> worker_tids() const;

 private:
  struct alignas(64) PerThread {
    SpinBudget barrier;  // waits at barriers
    SpinBudget idle;     // waits for the next job
    ChunkCursor cursor;
    std::atomic<int> tid{0};
  };
  void worker(int ith);
  void run_guarded(int ith);
  void stop_workers();

  int n_;
  WaitMode mode_;
  Barrier barrier_;
  std::unique_ptr<PerThread[]> state_;
  ChunkCounter chunks_;
  uint32_t next_tag_ = 1;  // first loop tag of the next job
  const std::function<void(int)>* job_ = nullptr;
  bool stop_ = false;
  alignas(64) std::atomic<uint32_t> generation_{0};  // bumped to start a job
  std::atomic<uint32_t> idle_sleepers_{0};
  alignas(64) std::atomic<uint32_t> pending_{0};  // workers still in the job
  std::atomic<uint32_t> done_{0};                 // bumped when the last one leaves
  std::atomic<uint32_t> done_sleepers_{0};
  std::mutex error_mutex_;
  std::exception_ptr error_;
  ThreadGroup threads_;  // last: started once the state above is ready
};

}  // namespace weir::cpu
