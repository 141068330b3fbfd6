// CudaOptions::profile (WEIR_CUDA_PROFILE=1): at each graph's first replay,
// the kernel time of every launch, each recorded into a CUDA graph of its
// own and replayed (its time without launch gaps; inputs in the cache state
// the previous replays left; launches are idempotent, so replaying is
// safe), summed per kind of launch and printed at the end. The whole
// graph's replay time next to the sum says what the gaps cost.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "backend/cuda/plan/launch_plan.h"

namespace weir::cuda {

class LaunchProfiler {
 public:
  // whole: the graph's recording; run_one(k) enqueues launch k alone.
  void profile(const LaunchPlan& p, cudaGraphExec_t whole, cudaStream_t stream,
               const std::function<void(size_t)>& run_one);
  // The table, on stderr, slowest kind first.
  void print(const char* device_name) const;

 private:
  struct Stat {
    uint64_t calls = 0;
    double ms = 0;
    double bytes = 0;  // weights read (mul_mat)
  };
  std::map<std::string, Stat> stats_;
};

}  // namespace weir::cuda
