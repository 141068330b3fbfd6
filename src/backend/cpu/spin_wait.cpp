#include "backend/cpu/spin_wait.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include "backend/cpu/futex.h"
#include "core/error.h"

namespace weir::cpu {
namespace {

uint64_t now_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

}  // namespace

// Yielding lasts until this long after the wait began.
constexpr uint64_t kYieldNs = 200'000;

uint32_t SpinBudget::target_ns() const { return std::clamp(2 * ema_ns_, kMinNs, kMaxNs); }

uint32_t SpinBudget::next_spin_ns() {
  if (oversubscribed_) return kMinNs;
  // While shrunk, every 64th wait spins in full to test whether spinning pays again.
  full_spin_ = !shrunk() || (++waits_ & 63) == 0;
  return full_spin_ ? target_ns() : kMinNs;
}

void SpinBudget::record(uint64_t waited_ns, bool slept) {
  const uint32_t w = uint32_t(std::min<uint64_t>(waited_ns, 2 * kMaxNs));
  ema_ns_ = uint32_t(int64_t(ema_ns_) + (int64_t(w) - int64_t(ema_ns_)) / 8);
  // Only full spins say whether spinning catches the waits; a token spin
  // that ended in sleep says nothing.
  if (full_spin_) sleep_rate_ = sleep_rate_ - sleep_rate_ / 8 + (slept ? 32 : 0);
}

namespace {

// Spin, yield, then sleep until done(value of word) holds.
template <class Done>
void wait_for(const std::atomic<uint32_t>& word, Done done, std::atomic<uint32_t>& sleepers, SpinBudget* budget) {
  if (!budget) {
    while (!done(word.load(std::memory_order_acquire))) cpu_relax();
    return;
  }
  // Check right away: a barrier's last arriver often finds the others there.
  if (done(word.load(std::memory_order_acquire))) return;
  const uint64_t t0 = now_ns();
  const uint64_t spin = budget->next_spin_ns();
  uint64_t t = t0;
  for (;;) {
    for (int i = 0; i < 16; ++i) {
      if (done(word.load(std::memory_order_acquire))) {
        budget->record(now_ns() - t0, false);
        return;
      }
      cpu_relax();
    }
    t = now_ns();
    if (t - t0 >= spin) break;
  }
  // Then yield for a while before sleeping: with more threads than cores the
  // thread everyone waits for is often runnable but preempted, and a yield
  // hands it this core at once, where a futex sleep would cost a wake-up
  // round trip per barrier (hundreds per token). With idle cores a yield
  // returns at once and this is a short spin. Counted as a sleep, so the
  // pause-spin budget shrinks where waits are this long.
  while (t - t0 < kYieldNs) {
    sched_yield();
    if (done(word.load(std::memory_order_acquire))) {
      budget->record(now_ns() - t0, true);
      return;
    }
    t = now_ns();
  }
  // Announce the sleep before the last look (seq_cst on both sides, see
  // bump_and_wake): either the waker sees us counted or we see its change.
  sleepers.fetch_add(1, std::memory_order_seq_cst);
  for (uint32_t v; !done(v = word.load(std::memory_order_seq_cst));) futex_wait(word, v);
  sleepers.fetch_sub(1, std::memory_order_relaxed);
  budget->record(now_ns() - t0, true);
}

}  // namespace

void wait_while_equal(const std::atomic<uint32_t>& word, uint32_t old, std::atomic<uint32_t>& sleepers,
                      SpinBudget* budget) {
  wait_for(word, [old](uint32_t v) { return v != old; }, sleepers, budget);
}

void wait_until_reached(const std::atomic<uint32_t>& word, uint32_t target, std::atomic<uint32_t>& sleepers,
                        SpinBudget* budget) {
  wait_for(word, [target](uint32_t v) { return int32_t(v - target) >= 0; }, sleepers, budget);
}

void add_and_wake(std::atomic<uint32_t>& word, uint32_t n, const std::atomic<uint32_t>& sleepers) {
  word.fetch_add(n, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) != 0) futex_wake_all(word);
}

void bump_and_wake(std::atomic<uint32_t>& word, const std::atomic<uint32_t>& sleepers) {
  add_and_wake(word, 1, sleepers);
}

}  // namespace weir::cpu
