// How a pool thread waits for a word to change (the barrier's phase, the
// next job): spin with the CPU's pause instruction for a budget, then sleep
// on the futex. The budget adapts per thread to its recent waits (SpinBudget).
// WEIR_BARRIER=spin makes barrier waits spin without end (for comparisons;
// burns a core per waiting thread); the default is WEIR_BARRIER=adaptive.
#pragma once
#include <atomic>
#include <cstdint>

namespace weir::cpu {

enum class WaitMode { Adaptive, Spin };
// From WEIR_BARRIER (read once); unknown values are an error naming it.

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// One thread's memory of its recent waits of one kind, and how long to spin
// on the next. Waits that a spin of ~2x the typical wait catches are cheap
// to spin for; waits that usually outlast that end in sleep anyway, and on
// an oversubscribed machine the spin would take the core from the thread
// being waited for, so then the budget drops to a token spin, with an
// occasional full spin to notice when waits get short again.
class SpinBudget {
 public:
  static constexpr uint32_t kMinNs = 1'000;
  static constexpr uint32_t kMaxNs = 100'000;
  static constexpr uint32_t kStartNs = 20'000;

  // Spin this long on the next wait.
  uint32_t next_spin_ns();
  // The wait took waited_ns in all; slept: the spin did not catch it.
  void record(uint64_t waited_ns, bool slept);

  // More threads than CPUs: a pause-spin only delays the preempted thread
  // being waited for, so spin a token while and go on to yielding.
  void set_oversubscribed(bool v) { oversubscribed_ = v; }

  uint32_t typical_ns() const { return ema_ns_; }
  bool shrunk() const { return sleep_rate_ > 128; }

 private:
  uint32_t target_ns() const;
  uint32_t ema_ns_ = kStartNs / 2;  // moving average of wait times (1/8 per wait)
  uint32_t sleep_rate_ = 0;         // share of full spins that ended in sleep, /256
  uint32_t waits_ = 0;
  bool full_spin_ = true;           // the current wait spins the full target
  bool oversubscribed_ = false;
};

// Waits until word != old. budget null: spin until then (WaitMode::Spin).
// Otherwise spin for budget->next_spin_ns(), then sleep on the futex;
// sleepers counts the threads asleep on word, so that wakers can skip the
// system call when there are none.
void wait_while_equal(const std::atomic<uint32_t>& word, uint32_t old,
                      std::atomic<uint32_t>& sleepers, SpinBudget* budget);
// The same until word has reached target (compared as a difference, so the
// count may wrap).
void wait_until_reached(const std::atomic<uint32_t>& word, uint32_t target, std::atomic<uint32_t>& sleepers,
                        SpinBudget* budget);
// Adds n to word and wakes its sleepers, if any; bump_and_wake adds 1.
void add_and_wake(std::atomic<uint32_t>& word, uint32_t n, const std::atomic<uint32_t>& sleepers);
void bump_and_wake(std::atomic<uint32_t>& word, const std::atomic<uint32_t>& sleepers);

}  // namespace weir::cpu
