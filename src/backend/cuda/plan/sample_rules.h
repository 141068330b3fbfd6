// The host side of the sampling kernels (ops_sample.cu), shared by the rule
// (sample_scratch_bytes, kernel_rules.h) and the launcher: the limits the
// kernels are built with and the scratch layout. Plain C++: no CUDA header.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace weir::cuda::sample {

constexpr int kChunk = 8192;  // logits per block of the chunk and sum kernels
constexpr int kMaxK = 1024;   // largest top-k handled by the sort (and the cap)

// A launch's shape and its scratch: per row and chunk, the best composite
// (u64) and a weight sum (double); per row, nchunks * cap candidate
// composites (u64), at off_cand.
struct Plan {
  int64_t V = 0, n = 0;
  int nchunks = 0, cap = 0;
  size_t off_sums = 0, off_cand = 0, bytes = 0;
};
// Throws weir::Error on operands the kernels do not take.
Plan plan_of(const Tensor& dst);

}  // namespace weir::cuda::sample
