// Threads started all or none. Every pool in weir (the CPU backend's, the
// quantizer's, synth's generators) starts its threads through start(): when
// the operating system refuses one (a memory or process limit), the threads
// already started are told to stop and joined, and ThreadStartError says how
// many of how many started and why. No thread is left waiting for a job that
// will not come, and no exception escapes a half-built pool.
#pragma once
#include <functional>
#include <thread>
#include <vector>

namespace weir {

class ThreadGroup {
 public:
  ThreadGroup() = default;
  ~ThreadGroup() { join(); }
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;

  // Starts n threads running body(i), i = first .. first + n - 1. On failure
  // calls stop() (it must make the started bodies return), joins them and
  // throws ThreadStartError.
  void start(int n, int first, const std::function<void(int)>& body, const std::function<void()>& stop);
  // Joins every thread (they must be returning).
  void join();
  size_t size() const { return threads_.size(); }

  // Tests: the next start() fails after starting this many threads (-1: off).
  static void fail_after_for_testing(int n);

 private:
  std::vector<std::thread> threads_;
};

}  // namespace weir
