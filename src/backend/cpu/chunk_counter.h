// Dynamic work sharing for the parallel loops of a job: the chunks of a loop
// go to whichever thread asks next, so faster (or not preempted) threads
// take more. All threads of a job run the same loops in the same order and
// number them alike: each loop's tag is one more than the last one's (the
// pool carries the numbering from job to job). One shared word holds the current loop's tag and its next chunk;
// the first thread to claim from a new loop resets it. This needs no barrier
// between loops: a thread starts loop k+1 only after finding loop k's chunks
// all taken, so a word with an older tag is free to reset, and a word with
// a newer tag tells a late thread that its loop is used up.
//
// Threads also count the chunks they finish (done()), so a thread can wait
// for the work of the loops before a point instead of for the other threads
// (ThreadPool::sync): a thread that took no chunk, or is descheduled
// between loops, holds no one up.
#pragma once
#include <atomic>
#include <cstdint>

#include "backend/cpu/spin_wait.h"

namespace weir::cpu {

class ChunkCounter {
 public:
  // Claims the next chunk (< n_chunks) of loop `tag` into *chunk; false when
  // they are all taken.
  bool claim(uint32_t tag, uint32_t n_chunks, uint32_t* chunk) {
    uint64_t v = word_.load(std::memory_order_relaxed);
    for (;;) {
      const uint32_t t = uint32_t(v >> 32), next = uint32_t(v);
      uint32_t mine;
      if (t == tag) {
        if (next >= n_chunks) return false;
        mine = next;
      } else if (int32_t(t - tag) > 0) {
        return false;  // a later loop has started: ours is used up
      } else {
        mine = 0;  // an earlier loop's word: this loop starts here
      }
      if (mine >= n_chunks) return false;
      const uint64_t want = uint64_t(tag) << 32 | (mine + 1);
      if (word_.compare_exchange_weak(v, want, std::memory_order_relaxed)) {
        *chunk = mine;
        return true;
      }
    }
  }

  // n more chunks are finished (their writes happen before this).
  void done(uint32_t n) { add_and_wake(done_, n, sleepers_); }
  // Waits until `total` chunks of this job are finished (and their writes
  // visible). budget: as wait_until_reached's.
  void wait_done(uint32_t total, SpinBudget* budget) { wait_until_reached(done_, total, sleepers_, budget); }
  // At the start of a job, before any thread runs it.
  void reset_done() { done_.store(0, std::memory_order_relaxed); }

 private:
  alignas(64) std::atomic<uint64_t> word_{0};
  alignas(64) std::atomic<uint32_t> done_{0};
  std::atomic<uint32_t> sleepers_{0};
};

// One thread's handle for the current job: the pool's counter, the tag of
// this thread's next loop, and the chunks of all loops it has passed.
struct ChunkCursor {
  ChunkCounter* counter = nullptr;
  uint32_t next_tag = 0;
  uint32_t passed = 0;
};

}  // namespace weir::cpu
