// The launch planner's working state (internal to plan/): one NodePlan a
// node, which the passes fill in turn (launch_plan.cpp runs them in order),
// read into Launch values at the end. A launch starts at a node that no
// earlier launch's span covers.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

#include "backend/cuda/plan/kernel_rules.h"
#include "backend/cuda_options.h"
#include "core/graph.h"

namespace weir::cuda::planner {

enum class Moe : unsigned char { None, Route, ExpertGlu, DownSum };

// The planner's working state of one node.
struct NodePlan {
  size_t scratch = 0;  // its launcher's temporary memory
  // Nodes run with this one as a norm launch: 1 (rms_norm here, mul next)
  // or 2 (add, rms_norm, mul); 0 for the rest.
  int norm_fused = 0;
  int products = 1;                 // products launched together from here (1: alone)
  bool x_q8_in_scratch = false;     // a product: reuses the 8-bit x already in scratch
  bool quantize_out = false;        // the launch here writes its result as 8-bit x for the next
  bool weights_constant = false;    // products: no kernel writes their weights; attention: its mask
  // Ropes and set_rows launched together from here: the nodes
  // [i, i + rope_store_len) (0: not such a launch). A rope whose only reader
  // is a set_rows writes into its cache (rope_writes_cache_of: that set_rows),
  // and the set_rows runs in no launch of its own.
  int rope_store_len = 0;
  int rope_writes_cache_of = -1;
  bool in_other_launch = false;     // computed by another launch (a rope's job)
  int rope_norm_node = -1;   // a rope's rms_norm (+ mul) run by its job (qwen3's q and k norms)
  int rope_scale_node = -1;  // a rope's only reader, a scale, run by its job (gemma3's q)
  int rope_bias_node = -1;   // the add of a bias row a rope or set_rows reads, run by its job (qwen2)
  // rms_norm + mul here, then add + rms_norm + mul at i + 2 whose add reads
  // the first mul alone: one launch (op_norm_add_norm).
  bool norm_add_norm = false;
  // A product here runs the add, rms_norm and mul after it, the norm
  // deferred to the product launches that read mul's result: those have
  // deferred_norm_writer = i.
  bool add_norm = false;
  int deferred_norm_writer = -1;
  // Products here whose results go to the rope/store launch after them, run
  // by the products' own launch (OpCtx::row_jobs): the jobs, one a product.
  // The product launch nearest to the rope/store launch spans it
  // (row_jobs_end); every launch that takes some of its jobs is planned as
  // one with it for memory (memory_end).
  std::vector<RopeStoreNode> row_jobs;
  size_t row_jobs_end = 0;
  size_t memory_end = 0;
  // gate/up products here (2 of them) that apply the GLU at i + 2 in their
  // launch; with 8-bit kernels they write it as 8-bit blocks for the product
  // launch after (x_from_glu there).
  bool glu_in_products = false;
  bool x_from_glu = false;
  Moe moe = Moe::None;
};

struct PlanState {
  std::vector<Tensor*> nodes;
  std::vector<NodePlan> at;  // by position in nodes
  // The nodes planned as one for memory from a launch at i: [i, unit_end(i)).
  size_t unit_end(size_t i) const { return std::max(i + span(i), at[i].memory_end); }
  // The nodes a launch at i runs (or, where at[i].in_other_launch, the
  // nodes another launch runs for it).
  size_t span(size_t i) const {
    const NodePlan& a = at[i];
    if (a.row_jobs_end) return a.row_jobs_end - i;
    if (a.moe != Moe::None) return a.moe == Moe::ExpertGlu ? 3 : 2;
    if (a.norm_add_norm) return 5;
    return size_t(a.add_norm                ? 4
                  : a.rope_store_len > 0    ? a.rope_store_len
                  : a.glu_in_products       ? 3
                  : a.products > 1          ? a.products
                                            : 1 + a.norm_fused);
  }
};

// How many nodes read each tensor (by id; views and graph outputs count).
using Readers = std::vector<int>;

// The passes, in the order plan_launches runs them after the norm and
// product groupings (launch_plan.cpp).
void plan_rope_store(PlanState& p, const Readers& readers, const CudaOptions& o);  // rope_passes.cpp
void plan_rope_norm(PlanState& p, const Readers& readers, const CudaOptions& o);
void plan_rope_bias(PlanState& p, const Readers& readers, const CudaOptions& o);
void plan_deferred_norms(PlanState& p, const Readers& readers, const CudaOptions& o);  // product_passes.cpp
void plan_row_jobs(PlanState& p, const Readers& readers, const CudaOptions& o);
void plan_glu(PlanState& p, const Readers& readers, const CudaOptions& o);
void plan_moe(PlanState& p, const Readers& readers, const CudaOptions& o);  // expert_passes.cpp

}  // namespace weir::cuda::planner
