// A test backend that does everything the backend contract allows and
// nothing it promises beyond it, so that a missing wait or copy shows up as
// a wrong result:
//  - its memory is apart from the host's: the host may not read it, and
//    copies are required (copy_to_host poisons its destination at submit, so
//    reading it before waiting reads NaNs);
//  - commands run later, on worker threads of its own (one for the compute
//    queue, one for the copy queue), each after a random delay; the two
//    queues are ordered only by events;
//  - events complete late, when their worker reaches them;
//  - a graph's inputs are poisoned after each run (they must be copied in
//    again), its activations when planned, and buffers when freed (kept,
//    poisoned, until the backend goes).
// It computes with the CPU's kernels (an inner CPU backend run on its
// compute worker), so its results equal the CPU's bit for bit.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"

namespace weir::test {

struct ChaosOptions {
  uint64_t seed = 1;
  int max_delay_us = 300;  // each command waits 0 .. this long first
  int threads = 2;         // of the inner CPU backend
  CpuOptions cpu;          // of the inner CPU backend
};

std::unique_ptr<Backend> make_chaos_backend(const ChaosOptions& o = {});

}  // namespace weir::test
