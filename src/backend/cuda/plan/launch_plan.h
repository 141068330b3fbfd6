// Which nodes of a graph the CUDA backend launches together, and how: host
// code over the Graph, built and tested without nvcc (tests/cuda_plan). A
// plan is a list of launches, each a value (Launch): its kind, its nodes,
// how long its memory is held, and where its input activations come from.
// The backend places memory with place_activations (launch_memory.h) and
// launches by one visit over the list.
//
// The fusions, each allowed by a rule of kernel_rules.h and each switched
// off by a CudaOptions knob for comparisons: an rms_norm with the mul after
// it, and the add before it (the residual stream); products on the same x
// as one launch (q/k/v, gate/up), quantizing x once; ropes and KV-cache
// writes as one launch, or run by the products' own launch (row jobs); q/k
// norms, q's scale and q/k/v biases run by the rope launch's jobs (qwen3,
// gemma3, qwen2); the residual add and norm in the product launch before
// them, the norm's division deferred to the products after (a deferred
// norm); a norm, the add after it and the next norm as one launch (gemma3);
// the GLU in the gate/up launch; the experts' routing, GLU and weighted sum
// in the launches around them. The terms: docs/architecture.md's glossary.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "backend/cuda/plan/kernel_rules.h"
#include "backend/cuda_options.h"
#include "core/graph.h"

namespace weir::cuda {

// What a launch runs; its nodes are Launch::first.. in this order.
enum class LaunchKind : unsigned char {
  Single,          // one node, by its op's launcher
  NormMul,         // rms_norm, mul (by a row of weights)
  AddNormMul,      // add, rms_norm, mul: writes the sum (the residual stream) and the scaled norm
  NormAddNorm,     // rms_norm, mul, add, rms_norm, mul (gemma3's post-norms and the next norm)
  Products,        // 1 to mul_mat_max_group() products on the same x (q/k/v, gate/up); with row jobs
                   // it also runs the ropes and KV-cache writes of its results (Launch::jobs)
  ProductsGlu,     // gate and up products and the GLU that reads them
  ProductAddNorm,  // a product, the residual add, rms_norm and mul after it; the norm deferred to
                   // the product launches that read mul's result (ActivationSource::DeferredNorm)
  RopeStore,       // ropes and set_rows (KV-cache writes) as jobs (Launch::jobs)
  Route,           // top_k and moe_weights of the same logits
  ExpertsGlu,      // gate and up mul_mat_id and the GLU that reads them
  ExpertsDownSum,  // down mul_mat_id and the moe_sum that reads it (decode)
  InOtherLaunch,   // no kernel: nodes another launch computes (a rope job's norm, bias add, scale or
                   // KV-cache write); listed for their memory
};

struct Launch {
  LaunchKind kind = LaunchKind::Single;
  // Its nodes, LaunchPlan::nodes[first, end); a product launch with row
  // jobs spans the rope/store nodes whose jobs it runs.
  size_t first = 0, end = 0;
  // The nodes [first, memory_end) are planned as one for memory: no output
  // of them lands on memory an input of them holds (its blocks run in no
  // set order). Past `end` where the launch writes results of later nodes
  // (row jobs, a rope job's scale) or reads inputs of nodes it absorbed.
  size_t memory_end = 0;
  int products = 0;  // Products: how many
  // Products, experts: where x comes from; DeferredNorm: the product node
  // whose launch wrote it (deferred_norm_writer; its norm is that + 2).
  ActivationSource x_from = ActivationSource::Rows;
  size_t deferred_norm_writer = 0;
  // Also writes its result as 8-bit blocks into scratch for the next
  // product launch (a norm, a GLU, attention).
  bool quantize_out = false;
  // Products: no kernel of the graph writes their weights (they may be
  // read before the previous launch ends); attention: the same of its mask.
  bool weights_constant = false;
  // RopeStore: its jobs; Products with row jobs: one a product, in order.
  std::vector<RopeStoreNode> jobs;

  // The node whose launcher runs it, and the node where its result is.
  size_t last() const { return end - 1; }
};

struct LaunchPlan {
  std::vector<Tensor*> nodes;    // the graph's nodes in order (no leaves or views)
  std::vector<Launch> launches;  // in order; together they hold every node once
  size_t scratch_bytes = 0;         // the most temporary memory a launch needs (OpCtx::scratch)
  size_t deferred_norm_bytes = 0;   // memory for deferred norms (OpCtx::deferred_norm)
  size_t glu_q8_bytes = 0;          // memory for the GLU's 8-bit blocks (OpCtx::glu_q8)

  // Launches one run of the graph makes (InOtherLaunch not counted).
  size_t kernel_launches() const;
  // What a launch does, as profiles and plan dumps name it.
  std::string label(const Launch& l) const;
};

// The plan of g's launches (g's nodes in order; scratch sizes by the options).
LaunchPlan plan_launches(const Graph& g, const CudaOptions& o);

// A node's kind, shape and weight type, as profiles group launches.
std::string profile_key(const Tensor& t);

}  // namespace weir::cuda
