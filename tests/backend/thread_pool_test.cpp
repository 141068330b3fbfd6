// ThreadPool: jobs, barriers (flat and grouped), chunked loops, idle CPU use,
// and a barrier stress test (scripts/tsan.sh runs it under ThreadSanitizer
// with WEIR_POOL_STRESS_PHASES=1000000).
#include "backend/cpu/thread_pool.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/ops_common.h"
#include "core/error.h"
#include "core/thread_group.h"

namespace weir::cpu {
namespace {

using Clock = std::chrono::steady_clock;

// Thread layouts to test: flat, and fake NUMA groups of uneven sizes.
std::vector<std::vector<int>> layouts() {
  return {{}, {0}, {0, 0}, {0, 1}, {0, 0, 0}, {0, 0, 1, 1}, {1, 0, 1, 0, 1}, {0, 1, 2, 0, 1, 2, 2}};
}
int n_of(const std::vector<int>& l) { return l.empty() ? 3 : int(l.size()); }

TEST(ThreadPool, RunCallsEveryThreadOnce) {
  for (const auto& l : layouts()) {
    for (WaitMode mode : {WaitMode::Adaptive, WaitMode::Spin}) {
      ThreadPool pool(n_of(l), l, mode);
      for (int job = 0; job < 50; ++job) {
        std::vector<std::atomic<int>> hits(size_t(pool.size()));
        pool.run([&](int ith) { hits[size_t(ith)]++; });
        for (auto& h : hits) ASSERT_EQ(h.load(), 1);
      }
    }
  }
}

TEST(ThreadPool, ExceptionsPropagateAndThePoolStaysUsable) {
  ThreadPool pool(3);
  for (int thrower : {0, 1, 2}) {
    EXPECT_THROW(pool.run([&](int ith) {
      pool.barrier(ith);
      if (ith == thrower) throw std::runtime_error("boom");
    }),
                 std::runtime_error);
    std::atomic<int> n{0};
    pool.run([&](int) { n++; });
    EXPECT_EQ(n.load(), 3);
  }
  EXPECT_THROW(pool.barrier(), Error);  // outside a job
}

TEST(ThreadPool, BadGroupsAreErrors) {
  EXPECT_THROW(ThreadPool(3, {0, 1}), Error);     // wrong count
  EXPECT_THROW(ThreadPool(3, {0, 2, 2}), Error);  // group 1 empty
  EXPECT_THROW(ThreadPool(2, {0, -1}), Error);
  EXPECT_EQ(ThreadPool(4, {0, 1, 1, 0}).n_groups(), 2);
}

// Thread i writes phase p into slot i, meets the others, and checks it sees
// every slot at p (two buffers, so a fast thread's next write cannot race).
void check_phases(ThreadPool& pool, int phases, std::mt19937* rng_seed = nullptr) {
  const int n = pool.size();
  std::vector<int> slots[2] = {std::vector<int>(size_t(n), -1), std::vector<int>(size_t(n), -1)};
  std::atomic<int> bad{0};
  const uint32_t seed = rng_seed ? (*rng_seed)() : 1;
  pool.run([&](int ith) {
    std::mt19937 rng(seed + uint32_t(ith));
    for (int p = 0; p < phases; ++p) {
      if (rng_seed) {  // random short work, now and then a long one (sleeping waits)
        const uint32_t r = rng();
        const int spins = (r & 1023) == 0 ? 10000 : int(r % 300);
        for (int i = 0; i < spins; ++i) cpu_relax();
      }
      slots[p & 1][size_t(ith)] = p;
      pool.barrier();
      for (int j = 0; j < n; ++j)
        if (slots[p & 1][size_t(j)] != p) bad++;
    }
  });
  EXPECT_EQ(bad.load(), 0);
}

TEST(ThreadPool, BarrierSeparatesPhases) {
  for (const auto& l : layouts())
    for (WaitMode mode : {WaitMode::Adaptive, WaitMode::Spin}) {
      ThreadPool pool(n_of(l), l, mode);
      // Pure spinning with more threads than cores waits out time slices.
      const bool slow = mode == WaitMode::Spin && n_of(l) > int(std::thread::hardware_concurrency());
      check_phases(pool, slow ? 5 : 500);
      check_phases(pool, 3);  // a second job on the same barrier
    }
}

// Several loops in a row without barriers, over many jobs: every item is run
// exactly once, chunks are aligned and in range.
TEST(ThreadPool, ChunksRunEveryItemExactlyOnce) {
  for (const auto& l : layouts()) {
    ThreadPool pool(n_of(l), l);
    std::mt19937 rng(7);
    for (int job = 0; job < 300; ++job) {
      const int n_loops = int(rng() % 4);  // some jobs run no loop at all
      std::vector<int64_t> n_items(static_cast<size_t>(n_loops)), chunk(static_cast<size_t>(n_loops));
      std::vector<std::vector<std::atomic<int>>> hits;
      for (int k = 0; k < n_loops; ++k) {
        n_items[size_t(k)] = int64_t(rng() % 1000);
        chunk[size_t(k)] = 1 + int64_t(rng() % 70);
        hits.emplace_back(size_t(n_items[size_t(k)]));
      }
      std::atomic<int> misaligned{0};
      pool.run([&](int ith) {
        OpContext c{ith, pool.size(), nullptr, false, pool.chunk_cursor(ith)};
        for (int k = 0; k < n_loops; ++k)
          for_each_chunk(c, n_items[size_t(k)], chunk[size_t(k)], [&](int64_t b, int64_t e) {
            if (b % chunk[size_t(k)] != 0 || e > n_items[size_t(k)] || e - b > chunk[size_t(k)] || e <= b)
              misaligned++;
            for (int64_t i = b; i < e; ++i) hits[size_t(k)][size_t(i)]++;
          });
      });
      ASSERT_EQ(misaligned.load(), 0);
      for (int k = 0; k < n_loops; ++k)
        for (int64_t i = 0; i < n_items[size_t(k)]; ++i)
          ASSERT_EQ(hits[size_t(k)][size_t(i)].load(), 1) << "job " << job << " loop " << k << " item " << i;
    }
  }
}

// Without the pool's cursor (kernels run thread by thread in tests), each
// thread takes its static share of the chunks.
TEST(ThreadPool, ChunksWithoutAPoolSplitStatically) {
  for (int nth : {1, 2, 3, 7}) {
    std::vector<int> hits(1001, 0);
    for (int ith = 0; ith < nth; ++ith)
      for_each_chunk(OpContext{ith, nth}, 1001, 16, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
      });
    for (int h : hits) ASSERT_EQ(h, 1);
  }
  EXPECT_EQ(chunk_size(OpContext{0, 4}, 1000, 16), 64);  // 1000 / 16 parts, rounded up to 16
  EXPECT_EQ(chunk_size(OpContext{0, 4}, 10, 1, 4, 8), 8);
}

// A slow thread leaves its work to the others.
TEST(ThreadPool, ChunksGoToTheFreeThreads) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> by(3);
  pool.run([&](int ith) {
    if (ith == 2) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    OpContext c{ith, pool.size(), nullptr, false, pool.chunk_cursor(ith)};
    for_each_chunk(c, 100, 1, [&](int64_t b, int64_t e) {
      by[size_t(ith)] += int(e - b);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    });
  });
  EXPECT_EQ(by[0] + by[1] + by[2], 100);
  EXPECT_LT(by[2].load(), 10);
}

// Loops of chunks with sync() between them: every chunk of a loop sees every
// item the loop before wrote, whoever wrote it. Random work per chunk; more
// threads than this machine has cores, so waits spin, yield and sleep.
void check_synced_loops(ThreadPool& pool, int loops, std::mt19937& rng) {
  const int64_t n = 97;
  std::vector<int> items[2] = {std::vector<int>(n, -1), std::vector<int>(n, -1)};
  std::vector<int64_t> chunk(static_cast<size_t>(loops));
  for (int64_t& c : chunk) c = 1 + int64_t(rng() % 40);
  const uint32_t seed = rng();
  std::atomic<int> bad{0};
  pool.run([&](int ith) {
    std::mt19937 r(seed + uint32_t(ith));
    OpContext c{ith, pool.size(), nullptr, false, pool.chunk_cursor(ith)};
    for (int k = 0; k < loops; ++k) {
      for_each_chunk(c, n, chunk[size_t(k)], [&](int64_t b, int64_t e) {
        const uint32_t w = r();
        const int spins = (w & 1023) == 0 ? 20000 : int(w % 200);
        for (int i = 0; i < spins; ++i) cpu_relax();
        for (int64_t i = b; i < e; ++i) {
          // Loop k reads what loop k-1 wrote into the other buffer.
          if (k > 0 && items[(k - 1) & 1][size_t(i)] != k - 1) bad++;
          items[k & 1][size_t(i)] = k;
        }
      });
      pool.sync(ith);
    }
  });
  EXPECT_EQ(bad.load(), 0);
}

TEST(ThreadPool, SyncWaitsForEveryChunkOfThePassedLoops) {
  std::mt19937 rng(3);
  for (int n : {2, 3, 5})
    for (WaitMode mode : {WaitMode::Adaptive, WaitMode::Spin}) {
      ThreadPool pool(n, {}, mode);
      const bool slow = mode == WaitMode::Spin && n > int(std::thread::hardware_concurrency());
      for (int job = 0; job < (slow ? 2 : 30); ++job) check_synced_loops(pool, slow ? 5 : 60, rng);
    }
  ThreadPool grouped(4, {0, 0, 1, 1});  // NUMA groups: sync() is a barrier
  for (int job = 0; job < 10; ++job) check_synced_loops(grouped, 40, rng);
}

// sync() waits for work, not for threads: a thread asleep for the whole job
// (descheduled, on an oversubscribed machine) holds no one up.
TEST(ThreadPool, SyncDoesNotWaitForThreadsWithoutChunks) {
  ThreadPool pool(3);
  std::atomic<bool> others_done{false};
  std::atomic<int> items{0};
  pool.run([&](int ith) {
    if (ith == 2) {
      // Wakes when the others have run every loop (or after 10 s: a failure).
      const auto end = Clock::now() + std::chrono::seconds(10);
      while (!others_done.load() && Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    OpContext c{ith, pool.size(), nullptr, false, pool.chunk_cursor(ith)};
    for (int k = 0; k < 50; ++k) {
      for_each_chunk(c, 64, 4, [&](int64_t b, int64_t e) { items += int(e - b); });
      pool.sync(ith);
    }
    if (ith == 0) others_done = true;
  });
  EXPECT_TRUE(others_done.load());
  EXPECT_EQ(items.load(), 50 * 64);
}

// A chunk that throws still counts as done: the others do not hang at the
// next sync, and the job rethrows on the caller.
TEST(ThreadPool, SyncAfterAThrowingChunkDoesNotHang) {
  ThreadPool pool(3);
  for (int64_t bad_chunk : {0, 7, 29}) {
    std::atomic<int> passed{0};
    EXPECT_THROW(pool.run([&](int ith) {
      OpContext c{ith, pool.size(), nullptr, false, pool.chunk_cursor(ith)};
      try {
        for_each_chunk(c, 30, 1, [&](int64_t b, int64_t) {
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          if (b == bad_chunk) throw std::runtime_error("boom");
        });
      } catch (...) {
        pool.sync(ith);
        passed++;
        throw;
      }
      pool.sync(ith);
      passed++;
    }),
                 std::runtime_error);
    EXPECT_EQ(passed.load(), 3);
  }
}

// CPU time of a thread in ns: schedstat (ns) where the kernel has it, and
// stat's utime + stime (clock ticks) as the brief measure.
struct CpuTimes {
  int64_t sched_ns = -1;
  int64_t ticks = 0;
};
CpuTimes cpu_times(int tid) {
  CpuTimes t;
  const std::string dir = "/proc/self/task/" + std::to_string(tid);
  std::ifstream ss(dir + "/schedstat");
  if (ss) ss >> t.sched_ns;
  std::ifstream st(dir + "/stat");
  std::string line;
  std::getline(st, line);
  // Fields after the ")" that ends the name: state is field 3, utime 14, stime 15.
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string f;
  for (int i = 3; i <= 15 && rest >> f; ++i) {
    if (i == 14 || i == 15) t.ticks += std::stoll(f);
  }
  return t;
}

TEST(ThreadPool, IdleWorkersUseNoCpu) {
  {  // (WEIR_BARRIER=spin changes barriers only: idle waits are the same)
    ThreadPool pool(4);
    // Train the spin budgets on busy work: short jobs back to back.
    const auto end = Clock::now() + std::chrono::milliseconds(100);
    while (Clock::now() < end) check_phases(pool, 20);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const std::vector<int> tids = pool.worker_tids();
    std::vector<CpuTimes> before;
    for (int tid : tids) before.push_back(cpu_times(tid));
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const double window_ns = double(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
    int64_t ticks = 0, sched_ns = 0;
    bool have_sched = true;
    for (size_t i = 0; i < tids.size(); ++i) {
      const CpuTimes now = cpu_times(tids[i]);
      ticks += now.ticks - before[i].ticks;
      sched_ns += now.sched_ns - before[i].sched_ns;
      have_sched = have_sched && now.sched_ns >= 0;
    }
    const double tick_ns = 1e9 / double(sysconf(_SC_CLK_TCK));
    EXPECT_LT(double(ticks) * tick_ns, 0.01 * window_ns) << ticks << " clock ticks";
    if (have_sched) {
      EXPECT_LT(double(sched_ns), 0.01 * window_ns) << sched_ns << " ns on CPU";
    }
  }
}

int stress_phases() {
  const char* v = std::getenv("WEIR_POOL_STRESS_PHASES");
  return v ? std::atoi(v) : 100000;
}

// Many phases of random work per thread, flat and grouped, more threads than
// this 2-core machine has, so waits both spin and sleep. A lost wake-up
// hangs; the watchdog turns that into a failure with a message.
TEST(ThreadPool, BarrierStress) {
  const int phases = stress_phases();
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    const auto deadline = Clock::now() + std::chrono::minutes(20);
    while (!done.load()) {
      if (Clock::now() > deadline) {
        std::fprintf(stderr, "BarrierStress: no end after 20 minutes (lost wake-up?)\n");
        std::abort();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  std::mt19937 rng(42);
  for (const std::vector<int>& l : {std::vector<int>{0, 0, 0}, std::vector<int>{0, 0, 1, 1}}) {
    ThreadPool pool(int(l.size()), l);
    check_phases(pool, phases / 2, &rng);
  }
  {  // sync() between chunked loops: as many loops as barrier phases / 10
    ThreadPool pool(3);
    for (int job = 0; job < phases / 10 / 100; ++job) check_synced_loops(pool, 100, rng);
  }
  done = true;
  watchdog.join();
}

// A pool whose threads cannot all start throws ThreadStartError with none of
// them left running, and a pool made after it works.
TEST(ThreadPool, StartsAllThreadsOrNone) {
  // The process's threads, once down to `want` (a joined thread's task can
  // outlive the join by a moment) or after a second.
  auto threads = [](int want) {
    int n = 0;
    for (int tries = 0; tries < 1000; ++tries) {
      std::ifstream status("/proc/self/status");
      for (std::string line; std::getline(status, line);)
        if (line.rfind("Threads:", 0) == 0) n = std::stoi(line.substr(8));
      if (n <= want) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return n;
  };
  const int before = threads(1);
  ThreadGroup::fail_after_for_testing(2);
  EXPECT_THROW(ThreadPool pool(6), ThreadStartError);
  EXPECT_EQ(threads(before), before);
  ThreadPool pool(4);
  std::atomic<int> ran{0};
  pool.run([&](int) { ++ran; });
  EXPECT_EQ(ran.load(), 4);
}

}  // namespace
}  // namespace weir::cpu
