// ThreadGroup: threads start all or none. A refused thread (simulated with
// fail_after_for_testing, as a memory or process limit would refuse it)
// stops and joins the ones already started, and the error says how many of
// how many.
#include "core/thread_group.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "core/error.h"

namespace weir {
namespace {

// Threads of this process, from /proc, once it is down to `want` (a joined
// thread's task can outlive the join by a moment) or after a second.
int process_threads(int want = 0) {
  int n = 0;
  for (int tries = 0; tries < 1000; ++tries) {
    n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
    if (n <= want) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return n;
}

TEST(ThreadGroup, StartsEveryThreadWithItsIndex) {
  std::atomic<int> sum{0};
  {
    ThreadGroup g;
    g.start(5, 10, [&](int i) { sum += i; }, nullptr);
    EXPECT_EQ(g.size(), 5u);
  }  // joined
  EXPECT_EQ(sum.load(), 10 + 11 + 12 + 13 + 14);
}

TEST(ThreadGroup, ARefusedThreadStopsAndJoinsTheStartedOnes) {
  const int before = process_threads(1);
  std::atomic<bool> stop{false};
  std::atomic<int> started{0}, returned{0};
  ThreadGroup g;
  ThreadGroup::fail_after_for_testing(3);
  try {
    g.start(
        8, 0,
        [&](int) {
          ++started;
          while (!stop.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
          ++returned;
        },
        [&] { stop = true; });
    FAIL() << "start() did not throw";
  } catch (const ThreadStartError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("8 threads"), std::string::npos) << msg;
    EXPECT_NE(msg.find("thread 4"), std::string::npos) << msg;
  }
  EXPECT_TRUE(stop.load());
  EXPECT_EQ(g.size(), 0u);
  EXPECT_EQ(returned.load(), started.load());
  EXPECT_EQ(started.load(), 3);
  EXPECT_EQ(process_threads(before), before);
  // The next start is not affected.
  std::atomic<int> ran{0};
  g.start(2, 0, [&](int) { ++ran; }, nullptr);
  g.join();
  EXPECT_EQ(ran.load(), 2);
}

}  // namespace
}  // namespace weir
