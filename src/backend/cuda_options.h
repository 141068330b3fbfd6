// The CUDA backend's options: every choice and knob it has, with its default
// and meaning, in one place. Tools set them (tools/cuda_env.cpp reads the
// WEIR_CUDA_* variables named here, for comparisons and diagnostics); tests
// set them per backend instance. Nothing below tools/ reads the environment.
#pragma once
#include <string>

namespace weir {

struct CudaOptions {
  int device = 0;
  // Record each graph's kernels once and replay them (CUDA graphs) from its
  // second run on. Off (WEIR_CUDA_GRAPHS=0): launch kernel by kernel.
  bool graphs = true;

  // Diagnostics.
  bool profile = false;           // WEIR_CUDA_PROFILE=1: kernel time of every kind of node, printed at the end
  bool plan_dump = false;         // WEIR_CUDA_PLAN_DUMP=1: each plan's launches, on stderr
  std::string pdl_off_ops;        // WEIR_CUDA_PDL_OFF_OPS=op,op: those ops launch without PDL (bisecting races)
  std::string pdl_nodes;          // WEIR_CUDA_PDL_NODES=LO-HI,...: only those plan nodes launch with PDL

  // Launch planning (launch_plan.h): fusions, on by default, off for
  // comparisons.
  bool glu_in_products = true;    // WEIR_CUDA_GLU_IN_PRODUCTS: the GLU runs in the gate/up products' launch
  bool defer_norm = true;         // WEIR_CUDA_DEFER_NORM: the residual add and norm run in the product launch before
                                  // them; the products after divide by the rms (a deferred norm)
  bool rope_in_products = true;   // WEIR_CUDA_ROPE_IN_PRODUCTS: the q/k/v launch ropes and writes the KV cache itself
  bool tile_group = true;         // WEIR_CUDA_TILE_GROUP: tile products on the same x in one launch
  bool float_group = true;        // WEIR_CUDA_FLOAT_GROUP: float decode products on the same x in one launch
  bool moe_fusions = true;        // WEIR_CUDA_MOE_FUSIONS: experts' routing, GLU and sum in the launches around them
  bool norm_chain = true;         // WEIR_CUDA_NORM_CHAIN: a norm, the add after it and the next norm in one launch
  bool rope_fusions = true;       // WEIR_CUDA_ROPE_FUSIONS: q/k norms (qwen3, gemma3), q's scale (gemma3) and q/k/v biases
                                  // (qwen2) in the rope launch

  // Kernel choices and tuning.
  bool pdl = true;                // WEIR_CUDA_PDL: programmatic dependent launch (Hopper and later)
  int staged = -1;                // WEIR_CUDA_STAGED: decode products staged through shared memory by the
                                  // copy unit: -1 launches of 8+ waves (default), 0 never, 1 every one it can
  int stages = 0;                 // WEIR_CUDA_STAGES: at most this many stages (0: the kernel's most)
  bool one_wave = true;           // WEIR_CUDA_ONE_WAVE: cap registers, or take fewer warps a row, so that a
                                  // decode product fits one wave of blocks
  bool add_norm_deep = true;      // WEIR_CUDA_ADD_NORM_DEEP: the deep kernel for small add+norm product launches
  int add_norm_split_k = 1;       // WEIR_CUDA_ADD_NORM_SPLIT_K: an add+norm product launch's rows split in K over a
                                  // thread-block cluster of 2 blocks (Hopper+): 0 never, 1 where the split
                                  // launch fits one wave (1B's down; q4_0/q5_0/q8_0 also at two blocks an SM:
                                  // 8B Q4_0's down and o), 2 always (one block an SM), 3 always (two)
  int add_norm_warps_per_row = 0; // WEIR_CUDA_ADD_NORM_WARPS_PER_ROW: at most this many warps a row in add+norm product
                                  // launches (0: no cap)
  int decode_warps_per_sm = 0;    // WEIR_CUDA_DECODE_WARPS_PER_SM: warps per SM decode products aim for (0: each kernel's best)
  bool early_weights = true;      // WEIR_CUDA_EARLY_WEIGHTS: fixed weights loaded before pdl_wait()
  bool tile_mma = true;           // WEIR_CUDA_TILE_MMA: tensor-core tiles for small batches
  int tile_max_tokens = 64;       // WEIR_CUDA_TILE_MAX_TOKENS: the most tokens the tile kernels take
  int mma_min_tokens = 5;         // WEIR_CUDA_MMA_MIN_TOKENS: products of the MMA tile kernel's types of at least this
                                  // many tokens run on it (16-token tiles), fewer on the decode kernels; 5-9 (up to
                                  // 4 tokens the decode kernels' fused launches stay; 9: the decode kernels to 8)
  int tile_blocks = 4;            // WEIR_CUDA_TILE_BLOCKS: tile blocks per SM aimed for
  int norm_float4s = 1;           // WEIR_CUDA_NORM_FLOAT4S: float4s per thread of the norm kernel, at least
  int attn_head_blocks = 3;       // WEIR_CUDA_ATTN_HEAD_BLOCKS: decode over a short span one query head a block:
                                  // 0 never, 1 where the span would be split, 2 also where one small grid
                                  // would take it (gemma3: 4 heads on one block otherwise), 3 also 512
                                  // threads for 256-dim heads (spans up to 256 keys in one launch)
  bool attn_strided = true;       // WEIR_CUDA_ATTN_STRIDED: decode split s takes every n-th tile of keys from
                                  // tile s, not a chunk (a sliding window at depth on many splits, not a few)
  int attn_blocks = 2;            // WEIR_CUDA_ATTN_BLOCKS: blocks per SM decode splits aim for
  int attn_rows = 8;              // WEIR_CUDA_ATTN_ROWS: query rows (heads of a kv head) an attn_vec decode block
                                  // takes at most (2 with 4 blocks an SM measured faster at depth before
                                  // attn_dec took F16 caches there: docs/perf.md)
  bool attn_decode_mma = true;    // WEIR_CUDA_ATTN_DECODE_MMA: decode over long spans on tensor cores (attn_dec: F16
                                  // caches, D 64/128/256); off: attn_vec on CUDA cores
  int attn_cluster = 1;           // WEIR_CUDA_ATTN_CLUSTER: attn_dec's splits of a kv head as one thread-block
                                  // cluster merged inside it (no attn_combine launch): 0 never, 1 where it
                                  // keeps every split (16 at most) and a split has at most 2 key tiles, 2-16
                                  // clusters of at most that many blocks wherever attn_dec splits (Hopper+)
  bool attn_sequence_hint = true; // WEIR_CUDA_ATTN_SEQUENCE_HINT: take the "one token per sequence" hint
  bool attn_early_mask = true;    // WEIR_CUDA_ATTN_EARLY_MASK: scan a fixed mask before pdl_wait()
};

}  // namespace weir
