// The host side of the attention kernels (ops_attention.cu; the kernels in
// attention_*.cuh), shared by the rule (attention_scratch_bytes,
// kernel_rules.h) and the launcher: the limits the kernels are built with,
// the operands' shape and the plans (which kernel, how many splits of the
// keys, the scratch they need). Plain C++: no CUDA header.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cuda_options.h"
#include "core/tensor.h"

namespace weir::cuda::attention {

// (kMaxSms: the scratch bound. kWideThreads: one split of a short span, a
// head a block; kWiderThreads: the same for 256-dim heads, a warp a key.
// kMaxClusterBlocks: Hopper's non-portable cluster size.)
inline constexpr int kThreads = 128;                          // both kernels
inline constexpr int kMaxSplits = 128;                        // attn_combine keeps the split weights in shared memory
inline constexpr int kMinSplitKeys = 64;                      // keys per split at least
inline constexpr int kMaxSms = 160;                           // splits are planned for this many SMs at most
inline constexpr size_t kMaxPartialBytes = size_t(16) << 20;  // cap on split partials
inline constexpr int kRangeChunk = 4096;                      // keys per attn_ranges block
inline constexpr int kBM = 64;                                // attn_mma rows per block
inline constexpr int kVecMaxRows = 8;                         // attn_vec rows per block, and the mma threshold
inline constexpr int kWideThreads = 256;                      // attn_vec, one split of a short span: a head a block
inline constexpr int kWiderThreads = 512;                     // the same for 256-dim heads (attn_head_blocks 3)
inline constexpr int kDecRows = 8;                            // attn_dec: query rows per block (the mma's n8)
inline constexpr int kMaxClusterBlocks = 16;                  // attn_dec: blocks a cluster at most (non-portable)
// Scratch: a token's range of unmasked keys (attn_ranges: an int2, first
// and last + 1) and a split's (max, sum) of a row (a float2).
inline constexpr size_t kRangeBytes = 8, kMaxSumBytes = 8;
// attn_dec's tiles (DecCfg<D>): warps a block, 16 keys of a tile each.
constexpr int dec_warps(int D) { return D >= 256 ? 2 : 4; }
constexpr int dec_keys_per_tile(int D) { return 16 * dec_warps(D); }
constexpr int dec_threads(int D) { return 32 * dec_warps(D); }
// attn_mma's key tiles (MmaCfg<D>::BN).
constexpr int mma_keys_per_tile(int D) { return D >= 256 ? 32 : 64; }

struct Shape {
  int64_t D = 0, Hq = 0, Hkv = 0, T = 0, S = 0;
  int64_t span = 0;  // keys a block of one sequence's tokens may see: S, or less by graph.h's max_keys hint
  bool f16 = false;
  bool q8 = false;        // 8-bit cache (q8_0 blocks)
  bool separate = false;  // no two tokens see the same keys (graph.h's hint)
  const CudaOptions* o = nullptr;  // the plan's knobs (attn_head_blocks, attn_strided, attn_blocks, attn_rows)
};

struct Plan {
  bool mma = false;
  bool dec = false;           // attn_dec (decode on tensor cores)
  int cluster = 0;            // attn_dec: the splits as one cluster, merged in it (splits blocks; 0: attn_combine)
  int L = 8, R = 1, TK = 1;   // attn_vec
  int threads = kThreads;     // attn_vec
  int splits = 1, chunk = 0;  // attn_vec: keys per split
  bool strided = false;       // attn_vec: split s takes every splits-th tile from tile s (chunk = S)
  int n_rchunks = 0;          // attn_mma: ranges per token
  size_t ranges_bytes = 0, ml_bytes = 0, o_bytes = 0;
  size_t scratch() const { return ranges_bytes + ml_bytes + o_bytes; }
};

inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
size_t round256(size_t n);
bool mma_dims(int64_t D);

// Operand checks; fills the shape. Throws weir::Error naming dst.
Shape check(const Tensor& dst, const CudaOptions& o);

// The plans of each kernel for `sm` SMs, at most max_splits splits.
Plan plan_vec(const Shape& s, int sm, int max_splits = kMaxSplits);
// How many clusters of cluster_blocks blocks of attn_dec the device runs at
// once (0: none), asked of the device (ops_attention.cu).
using ActiveClusters = int (*)(const Shape& s, int cluster_blocks);
// attn_dec's plan; its splits as one cluster where active_clusters says
// they all run at once (null: no clusters, the scratch bound).
Plan plan_dec(const Shape& s, int sm, int max_splits = kMaxSplits, ActiveClusters active_clusters = nullptr);
Plan plan_mma(const Shape& s, int sm, int max_splits = kMaxSplits);

bool mma_eligible(const Shape& s);
bool dec_eligible(const Shape& s);
// The shape as the kernels see an 8-bit cache once copied into halves.
Shape as_halves(Shape s);
// Prefill over an 8-bit cache: scratch for its cells as halves (0: none).
size_t half_copy_bytes(const Shape& s);
// Scratch ahead of the partials for the output as 8-bit blocks (OpCtx::
// quantize_out: the decode product after attention reads them there).
size_t q8_reserve(const Shape& s);

}  // namespace weir::cuda::attention
