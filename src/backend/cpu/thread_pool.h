// A persistent pool of worker threads that run one parallel job at a time.
// The caller's thread is worker 0, so a pool of n threads starts n-1. Idle
// workers sleep on a futex (std::atomic::wait) and use no CPU; between the
// steps of a job, workers meet at barrier(), which spins briefly and then
// sleeps. (The adaptive spin budget and NUMA-aware variant come later, behind
// this same interface.)
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace weir::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_; }
  // Runs job(ith) on every thread (ith = 0 on the caller) and returns when all
  // are done. Exceptions from job are rethrown on the caller (the first one).
  void run(const std::function<void(int ith)>& job);
  // All threads of the current job meet here.
  void barrier();

 private:
  void worker(int ith);
  int n_;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint32_t> generation_{0};  // bumped to start a job
  std::atomic<int> running_{0};          // workers still in the job
  std::atomic<bool> stop_{false};
  // barrier state
  std::atomic<int> arrived_{0};
  std::atomic<uint32_t> phase_{0};
  std::exception_ptr error_;
  std::atomic<bool> has_error_{false};
};

}  // namespace weir::cpu
