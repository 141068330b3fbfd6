// Micro-benchmarks of the CPU thread pool's barrier: ns per phase with no
// work between barriers, spin vs adaptive waits, 2 and 4 threads, each of 5
// runs 200 ms; and the phases of tests/backend/thread_pool_test.cpp's
// BarrierStress (random short work, now and then a long one, more threads
// than a 2-core machine has). Printed, not asserted.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "backend/cpu/spin_wait.h"
#include "backend/cpu/thread_pool.h"

namespace weir::cpu {
namespace {

using Clock = std::chrono::steady_clock;

TEST(ThreadPool, BarrierNsPerPhase) {
  const auto run_for = std::chrono::milliseconds(200);
  for (int n : {2, 4})
    for (WaitMode mode : {WaitMode::Spin, WaitMode::Adaptive}) {
      ThreadPool pool(n, {}, mode);
      std::vector<double> runs;
      for (int rep = 0; rep < 6; ++rep) {  // the first one warms up
        std::atomic<bool> stop{false};
        int64_t phases = 0;
        const auto t0 = Clock::now();
        pool.run([&](int ith) {
          // Thread 0 may raise stop at phases 0 mod 64, all read it at 32 mod
          // 64: at least one barrier between every write and read.
          for (int64_t p = 1;; ++p) {
            pool.barrier(ith);
            if ((p & 63) == 32 && stop.load(std::memory_order_relaxed)) {
              if (ith == 0) phases = p;
              break;
            }
            if (ith == 0 && (p & 63) == 0 && Clock::now() - t0 > run_for) stop = true;
          }
        });
        if (rep > 0) runs.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / double(phases));
      }
      std::sort(runs.begin(), runs.end());
      std::printf("barrier %d threads %-8s median %9.0f ns/phase (min %.0f, max %.0f)\n", n,
                  mode == WaitMode::Spin ? "spin" : "adaptive", runs[2], runs[0], runs[4]);
    }
}

// BarrierStress's load (its checks are the test's): per phase each thread
// spins 0-299 times, one phase in 1024 10,000 times, then meets the others;
// 3 threads flat and 4 in two groups.
TEST(ThreadPool, StressPhasesUsPerPhase) {
  const int phases = 50000;
  for (const std::vector<int>& l : {std::vector<int>{0, 0, 0}, std::vector<int>{0, 0, 1, 1}}) {
    ThreadPool pool(int(l.size()), l);
    const auto t0 = Clock::now();
    pool.run([&](int ith) {
      std::mt19937 rng(42 + uint32_t(ith));
      for (int p = 0; p < phases; ++p) {
        const uint32_t r = rng();
        const int spins = (r & 1023) == 0 ? 10000 : int(r % 300);
        for (int i = 0; i < spins; ++i) cpu_relax();
        pool.barrier();
      }
    });
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / phases;
    std::printf("stress phases, %zu threads%s: %.2f us/phase\n", l.size(), l.back() ? " in 2 groups" : "", us);
  }
}

}  // namespace
}  // namespace weir::cpu
