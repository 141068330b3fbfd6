// The one-shot collectives over NVLink peer memory (comm/gpu_comm.h): one
// kernel a call, capturable in a CUDA graph.
//
// The data carries its own flags (the "low latency" layout): every 16-byte
// word holds two floats, each beside the call's number, written by one
// store, so a reader knows a word has arrived when both numbers are this
// call's; no fence and no separate flag round trip. Every rank owns, on its
// GPU, a receive buffer of 2 x size slots of `cap` float pairs (the two
// halves alternate between calls). A call writes this rank's data into slot
// [half][rank] of every rank's buffer, then reads slot [half][q] of its own
// buffer for every q, waiting word by word: summed in rank order
// (all-reduce) or put at its rows (all-gather). A rank cannot reuse a half
// before every rank has finished reading it: writing call k + 2 needs call
// k + 1's data from every rank, which each writes only after its call k's
// kernel has finished.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace weir::comm_cuda {

inline constexpr int kMaxRanks = 8;
inline constexpr int kMaxBlocks = 16;  // every call runs all of them (nvlink_kernels.cu says why)

struct NvlinkPeers {
  uint4* recv[kMaxRanks];  // each rank's receive buffer (2 * size * pairs words)
  uint32_t* epochs;        // this rank's call counters, a block each (kMaxBlocks)
  int rank = 0, size = 1;
  size_t cap = 0;                // floats a slot (even)
  long long timeout_cycles = 0;  // a wait past this traps (a rank that never came)
};

// Bytes of one rank's receive buffer for `cap` floats a slot and n ranks.
size_t nvlink_buffer_bytes(size_t cap, int n);

// Loads the kernels on the current device now (lazy module loading would
// load them at their first launch, which may be inside a graph recording).
void nvlink_load_kernels();

// dst[i] = sum over ranks of src[i] (rank order), i < n (n <= cap).
void nvlink_all_reduce(const NvlinkPeers& p, const float* src, float* dst, size_t n, cudaStream_t s);
// Rows split by split_range(total, size, r) over `cols` columns (src [rows_r,
// cols] with leading dimension src_ld; dst [total, cols], dst_ld); rows_r *
// cols <= cap for every rank.
void nvlink_all_gather(const NvlinkPeers& p, const float* src, size_t src_ld, float* dst, size_t dst_ld,
                       int64_t total, int64_t cols, cudaStream_t s);

}  // namespace weir::comm_cuda
