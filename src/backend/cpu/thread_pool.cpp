#include "backend/cpu/thread_pool.h"

#include <exception>
#include <mutex>

namespace weir::cpu {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spin this many rounds before sleeping; a node of a decode step takes
// microseconds, so a short spin avoids a futex round trip on most waits.
constexpr int kSpinRounds = 1 << 14;

std::mutex g_error_mutex;

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_(n_threads < 1 ? 1 : n_threads) {
  for (int i = 1; i < n_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::worker(int ith) {
  uint32_t seen = 0;
  for (;;) {
    for (int i = 0; i < kSpinRounds && generation_.load(std::memory_order_acquire) == seen; ++i)
      cpu_relax();
    generation_.wait(seen, std::memory_order_acquire);
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    try {
      (*job_)(ith);
    } catch (...) {
      std::lock_guard<std::mutex> lock(g_error_mutex);
      if (!has_error_.exchange(true)) error_ = std::current_exception();
    }
    if (running_.fetch_sub(1, std::memory_order_acq_rel) == 1) running_.notify_one();
  }
}

void ThreadPool::run(const std::function<void(int)>& job) {
  job_ = &job;
  has_error_.store(false);
  error_ = nullptr;
  running_.store(n_ - 1, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  try {
    job(0);
  } catch (...) {
    std::lock_guard<std::mutex> lock(g_error_mutex);
    if (!has_error_.exchange(true)) error_ = std::current_exception();
  }
  for (;;) {
    int r = running_.load(std::memory_order_acquire);
    if (r == 0) break;
    running_.wait(r, std::memory_order_acquire);
  }
  job_ = nullptr;
  if (has_error_.load()) std::rethrow_exception(error_);
}

void ThreadPool::barrier() {
  if (n_ == 1) return;
  const uint32_t phase = phase_.load(std::memory_order_acquire);
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
    arrived_.store(0, std::memory_order_relaxed);
    phase_.fetch_add(1, std::memory_order_acq_rel);
    phase_.notify_all();
    return;
  }
  for (int i = 0; i < kSpinRounds; ++i) {
    if (phase_.load(std::memory_order_acquire) != phase) return;
    cpu_relax();
  }
  while (phase_.load(std::memory_order_acquire) == phase) phase_.wait(phase, std::memory_order_acquire);
}

}  // namespace weir::cpu
