// Collectives between the ranks of a tensor-parallel group, as graphs use
// them: the all_reduce and all_gather ops (core/graph.h) hold a Collective,
// and the backend that runs the graph calls it. The implementations live in
// src/comm/ (threads of one process, MPI, NCCL, a one-shot NVLink kernel);
// this is only the interface, so that backends need not know them.
//
// Every rank calls the same collectives in the same order. Results are the
// same bit for bit on every rank: sums run in rank order 0, 1, ... n-1
// everywhere, so ranks that sample the same token from the same random
// stream never diverge.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"

namespace weir {

// A collective failed: a peer failed or stopped, or did not come in time.
// Every rank of the group gets one instead of waiting for ever.
struct CommError : Error {
  using Error::Error;
};

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "threads", "mpi", "nccl", "nvlink": for messages and bench.
  virtual std::string kind() const = 0;

  // dst[i] = sum over ranks of src[i], i < n (src may be dst). `stream`:
  // the CUDA stream to queue the work on (device pointers), or null for
  // host memory, done when the call returns.
  virtual void all_reduce_sum(const float* src, float* dst, size_t n, void* stream) = 0;

  // Rows of a matrix split over the ranks, gathered on every rank: rank r
  // holds rows [off_r, off_r + rows_r) of `total` (split_range(total, size,
  // r)), for `cols` columns, column c of its part at src + c * src_ld; dst
  // column c (dst + c * dst_ld) receives all `total` rows.
  virtual void all_gather_rows(const float* src, size_t src_ld, float* dst, size_t dst_ld, int64_t total,
                               int64_t cols, void* stream) = 0;

  // Called when a graph is planned, not while one is recorded: the largest
  // message (floats) a collective of this rank will get, so that device
  // buffers are made now (nothing may be allocated inside a CUDA graph
  // recording).
  virtual void prepare(size_t max_floats) { (void)max_floats; }

  // Called by every rank of a step once its host work for the step is done
  // (graphs planned and recorded, memory allocated or freed) and before it
  // queues the step's work. GPUs of one process meet here: a CUDA free (and
  // some allocations) waits for the work of every GPU with peer access, and
  // that work may be a collective waiting for the very rank that frees: a
  // deadlock. Elsewhere nothing to do.
  virtual void before_launch() {}

  // Makes every rank's pending or next collective throw CommError with this
  // reason (a rank failed: the others must not wait for it).
  virtual void abort(const std::string& why) = 0;
};

// The part of `total` that rank r of n holds: [begin, end). Parts differ by
// at most one, the first ones larger.
struct Range {
  int64_t begin = 0, end = 0;
  constexpr int64_t size() const { return end - begin; }
};
constexpr Range split_range(int64_t total, int n, int r) {
  const int64_t base = total / n, extra = total % n;
  const int64_t begin = r * base + (r < extra ? r : extra);
  return {begin, begin + base + (r < extra ? 1 : 0)};
}

// How the ranks make the whole result of a product whose weight is split
// by its input over them: attention's output (Wo, its input the heads) and
// the FFN's down (its input the FFN's columns). model/shard.h builds both.
enum class RowParallel {
  // Each rank multiplies its slice of x by its columns of W, a partial sum
  // of every output; an all_reduce adds them. One collective a product, the
  // GPU's form (NCCL, the NVLink all-reduce). The sums add in another order
  // than one rank's dot product: results differ from --tp 1 in the last
  // bits, and more where the backend rounds the next product's input (the
  // CPU's llama.cpp rounding turns a last-bit difference into a step).
  PartialSums,
  // Each rank gathers x whole (all_gather), computes its share of the
  // output rows (split_range of N) over all of K, and the rows are gathered
  // (all_gather): every output is one whole dot product, computed as one
  // rank computes it. Two collectives a product; results equal --tp 1 bit
  // for bit where the kernels do not depend on the row split (the CPU's).
  // The FFN's columns then need not split on whole blocks.
  WholeRows,
};

// Where a model's graph sits in a tensor-parallel group: rank `rank` of
// `size`, its collectives through `comm` (null when size is 1), its
// row-parallel products in the form `row_parallel`.
struct TensorParallel {
  int rank = 0;
  int size = 1;
  Collective* comm = nullptr;
  RowParallel row_parallel = RowParallel::PartialSums;
};

}  // namespace weir
