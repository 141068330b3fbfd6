#include "backend/cpu/thread_pool.h"

#include <sched.h>

#include <sys/syscall.h>
#include <unistd.h>

#include "core/error.h"

namespace weir::cpu {
namespace {

// The pool and index of the job this thread is running, for barrier().
struct Member {
  const ThreadPool* pool = nullptr;
  int ith = 0;
};
thread_local Member tl_member;

}  // namespace

ThreadPool::ThreadPool(int n_threads, std::vector<int> group_of_thread)
    : ThreadPool(n_threads, std::move(group_of_thread), WaitMode::Adaptive) {}

ThreadPool::ThreadPool(int n_threads, std::vector<int> group_of_thread, WaitMode mode)
    : n_(n_threads < 1 ? 1 : n_threads),
      mode_(mode),
      barrier_(n_, std::move(group_of_thread)),
      state_(std::make_unique<PerThread[]>(size_t(n_))) {
  // CPUs this process may run on (threads pinned later keep within them).
  cpu_set_t set;
  CPU_ZERO(&set);
  const int n_cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : n_;
  for (int i = 0; i < n_; ++i) {
    state_[size_t(i)].cursor.counter = &chunks_;
    state_[size_t(i)].barrier.set_oversubscribed(n_ > n_cpus);
  }
  // All or none: a thread the system refuses stops the ones started.
  threads_.start(n_ - 1, 1, [this](int i) { worker(i); }, [this] { stop_workers(); });
}

ThreadPool::~ThreadPool() {
  stop_workers();
  threads_.join();
}

void ThreadPool::stop_workers() {
  stop_ = true;  // published by the bump below
  bump_and_wake(generation_, idle_sleepers_);
}

std::vector<int> ThreadPool::worker_tids() const {
  std::vector<int> tids;
  for (int i = 1; i < n_; ++i) {
    while (state_[size_t(i)].tid.load() == 0) std::this_thread::yield();
    tids.push_back(state_[size_t(i)].tid.load());
  }
  return tids;
}

void ThreadPool::run_guarded(int ith) {
  try {
    (*job_)(ith);
  } catch (...) {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::worker(int ith) {
  tl_member = {this, ith};
  PerThread& me = state_[size_t(ith)];
  me.tid.store(int(syscall(SYS_gettid)));
  uint32_t seen = 0;
  for (;;) {
    wait_while_equal(generation_, seen, idle_sleepers_, &me.idle);
    seen = generation_.load(std::memory_order_acquire);
    if (stop_) return;
    run_guarded(ith);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) bump_and_wake(done_, done_sleepers_);
  }
}

void ThreadPool::run(const std::function<void(int)>& job) {
  const Member outer = tl_member;
  tl_member = {this, 0};
  job_ = &job;
  error_ = nullptr;
  for (int i = 0; i < n_; ++i) {
    state_[size_t(i)].cursor.next_tag = next_tag_;
    state_[size_t(i)].cursor.passed = 0;
  }
  chunks_.reset_done();
  const uint32_t done = done_.load(std::memory_order_relaxed);
  pending_.store(uint32_t(n_ - 1), std::memory_order_relaxed);
  if (n_ > 1) bump_and_wake(generation_, idle_sleepers_);  // publishes the above
  run_guarded(0);
  if (n_ > 1) {
    SpinBudget* budget = mode_ == WaitMode::Spin ? nullptr : &state_[0].barrier;
    while (done_.load(std::memory_order_acquire) == done)
      wait_while_equal(done_, done, done_sleepers_, budget);
  }
  // Tags keep increasing from job to job (chunk_counter.h); all threads ran
  // the same loops unless one failed, so take the furthest.
  // (Compared as a difference: the numbers wrap.)
  for (int i = 0; i < n_; ++i) {
    const uint32_t t = state_[size_t(i)].cursor.next_tag;
    if (int32_t(t - next_tag_) > 0) next_tag_ = t;
  }
  job_ = nullptr;
  tl_member = outer;
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::barrier(int ith) {
  if (n_ == 1) return;
  barrier_.arrive_and_wait(ith, mode_ == WaitMode::Spin ? nullptr : &state_[size_t(ith)].barrier);
}

void ThreadPool::sync(int ith) {
  if (n_ == 1) return;
  if (mode_ == WaitMode::Spin || barrier_.n_groups() > 1) return barrier(ith);
  PerThread& me = state_[size_t(ith)];
  chunks_.wait_done(me.cursor.passed, &me.barrier);
}

void ThreadPool::barrier() {
  if (tl_member.pool != this) throw Error("thread pool: barrier() called outside one of its jobs");
  barrier(tl_member.ith);
}

}  // namespace weir::cpu
