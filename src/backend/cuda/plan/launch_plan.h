// Which nodes of a graph the CUDA backend launches together, and how: pure
// host logic over the Graph (tested without a GPU: tests/cuda_plan). The
// fusions: an rms_norm with the mul after it (and the add before it: the
// residual stream); products on the same x as one launch (q/k/v, gate/up),
// quantizing x once; ropes and KV-cache writes as one launch, or run by the
// products' own launch (row jobs); q/k norms and q's scale run by the rope
// launch's jobs (qwen3, gemma3); the residual norm folded into the products
// around it; a norm, the add after it and the next norm as one launch
// (gemma3); the GLU in the gate/up launch; the experts' routing, GLU and
// weighted sum in the launches around them. Each can be turned off
// (CudaOptions) for comparisons. The kernels the plan picks are tested on a
// GPU (tests/cuda).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda_options.h"
#include "core/graph.h"

namespace weir::cuda {

struct LaunchPlan {
  std::vector<Tensor*> nodes;
  std::vector<size_t> scratch;  // per node
  // Nodes run fused with node i: 1 (rms_norm i, mul i + 1) or 2 (add i,
  // rms_norm i + 1, mul i + 2); 0 for the rest.
  std::vector<int> fused;
  std::vector<bool> x_quantized;   // mul_mat node i reuses the 8-bit x already in scratch
  std::vector<bool> quantize_out;  // the launch at node i writes its result as 8-bit x for the next
  std::vector<bool> w_fixed;       // mul_mat (group) at node i: no kernel writes its weights; attention: its mask
  // Ropes and set_rows launched together from node i (op_rope_store): the
  // nodes [i, i + rope_store[i]) (0: not such a launch); a rope whose only
  // reader is a set_rows writes into its cache (rope_into: that node), and
  // the set_rows is skipped.
  std::vector<int> rope_store;
  std::vector<int> rope_into;
  std::vector<bool> skip;
  // A rope of a rope_store launch that reads an rms_norm + mul alone
  // (qwen3's q and k norms): the norm's node (its launch skipped, planned
  // for memory as one with the rope's launch: mem_end); -1: none.
  std::vector<int> rope_norm;
  // A rope whose only reader is a scale (gemma3's q): the scale's node,
  // skipped (the rope's job writes the scaled rows as its result); -1: none.
  std::vector<int> rope_scale;
  // A rope or set_rows of a rope_store launch that reads an add of a bias
  // row alone (qwen2's q, k and v biases): the add's node (skipped, its
  // operands kept until the rope's launch ends: mem_end); -1: none.
  std::vector<int> rope_bias;
  // rms_norm + mul at i, then add + rms_norm + mul at i + 2 (fused 1, then
  // 2) whose add reads the first mul alone: one launch (op_norm_add_norm).
  std::vector<bool> norm_chain;
  // A product at node i that runs with the add, norm and mul after it,
  // the norm folded into it and into the products of the next launch
  // (mul_mat_q8.h): those have fold_from = i.
  std::vector<bool> fold;
  std::vector<int> fold_from;
  // Products at node i whose results go to the rope_store launch after
  // them, run by the products' own launch (OpCtx::row_jobs): the jobs, one
  // a product; the product launch nearest to the rope_store launch spans it
  // (jobs_end: the end of its nodes). Every launch that takes some of its
  // jobs is planned as one with it for memory (mem_end, from node i: it
  // writes results of nodes that come later).
  std::vector<std::vector<RopeStoreNode>> row_jobs;
  std::vector<size_t> jobs_end;
  std::vector<size_t> mem_end;
  // gate/up products at node i (a group of 2) that apply the GLU at i + 2
  // in their launch and hand it to the product launch after as 8-bit
  // blocks (op_mul_mat_glu); that launch has x_handed.
  std::vector<bool> glu;
  std::vector<bool> x_handed;
  // Mixture-of-experts launches from node i (moe_ops.h): top_k with the
  // moe_weights after it; gate/up mul_mat_id with the GLU (i .. i + 2),
  // handing it to the down launch as 8-bit blocks (x_handed); down with the
  // moe_sum after it (decode).
  enum class Moe : unsigned char { None, Route, ExpertGlu, DownSum };
  std::vector<Moe> moe;
  // The nodes planned as one for memory from launch i: [i, unit_end(i)).
  size_t unit_end(size_t i) const { return std::max(i + span(i), mem_end[i]); }
  size_t span(size_t i) const {
    if (jobs_end[i]) return jobs_end[i] - i;
    if (moe[i] != Moe::None) return moe[i] == Moe::ExpertGlu ? 3 : 2;
    if (norm_chain[i]) return 5;
    return size_t(fold[i]             ? 4
                  : rope_store[i] > 0 ? rope_store[i]
                  : glu[i]            ? 3
                  : group[i] > 1      ? group[i]
                                      : 1 + fused[i]);
  }
  std::vector<int> group;            // products launched together from node i (1: alone)
  // Launches one run of the graph makes.
  size_t launches() const;
  // What the launch from node i does, as profiles and plan dumps name it.
  std::string label(size_t i) const;
};

// The plan of g's launches (g's nodes in order; scratch sizes by the options).
LaunchPlan plan_launches(const Graph& g, const CudaOptions& o);

// The planner's promise, checked once memory is placed: no node of a launch
// writes memory that an input from outside the launch occupies (the blocks
// of a launch run in no set order). Throws Error naming the launch.
void check_launch_memory(const LaunchPlan& p);

// A node's kind, shape and weight type, as profiles group launches.
std::string profile_key(const Tensor& t);

}  // namespace weir::cuda
