// --fit (-ngl auto): as much of a model on one GPU as its free memory holds,
// placed for decode speed, in the terms the runtime already speaks (-ngl,
// --n-cpu-moe, --cpu-moe).
//
// The rule (plan_gpu_fit, a pure function of byte counts):
//  - budget = min(free, --fit-vram) - margin, where the margin is the
//    working memory the load check allows (0.75 GiB: activations, cuBLAS)
//    plus 5% of min(free, --fit-vram) for what grows with use (more step
//    shapes' arenas, CUDA graphs, fragmentation); a GPU layer costs its
//    weights and its KV cache.
//  - Dense model: whole layers from the last one backwards, as -ngl takes
//    them; the output head (and the embedding, as -ngl puts them) only when
//    every layer fits, and it fits too.
//  - Mixture of experts: a token reads every byte of attention and shared
//    weights but only its chosen experts' share of the expert weights, so
//    the non-expert weights go first. When all layers' non-expert weights,
//    their KV caches and the head fit, every layer goes to the GPU and the
//    experts follow from the last layer backwards (--n-cpu-moe N keeps the
//    first N layers' on the CPU). Otherwise every expert stays on the CPU
//    (--cpu-moe) and the layers' other weights go as for a dense model.
// Weights that -ot (or --cpu-moe given by hand) sends to the CPU cost the GPU
// nothing; those it sends to the GPU are charged first, whatever else fits.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace weir {

struct FitInput {
  std::vector<uint64_t> layer_bytes;   // per layer: weights other than the experts that could go to the GPU
  std::vector<uint64_t> expert_bytes;  // per layer: expert weights (as --cpu-moe names them); empty: dense
  uint64_t head_bytes = 0;             // output head, embedding and the rest outside the layers
  uint64_t fixed_bytes = 0;            // weights -ot puts on the GPU whatever the fit
  uint64_t kv_bytes_per_layer = 0;     // a GPU layer's KV cache
  uint64_t free_bytes = 0;             // the GPU's free memory now
  uint64_t cap_bytes = 0;              // --fit-vram: the most the fit may use (0: no cap)
  uint64_t margin_bytes = 0;           // working memory kept free (fit_margin)
};

struct FitPlan {
  int n_layer = 0;         // the model's layers
  int n_gpu_layers = 0;    // as -ngl: the last N layers (n_layer + 1: the head too)
  bool cpu_moe = false;    // as --cpu-moe: every layer's experts on the CPU
  int n_cpu_moe = 0;       // as --n-cpu-moe: the first N layers' experts on the CPU
  bool moe = false;        // the model has experts that could go to the GPU
  uint64_t usable = 0;     // min(free, cap)
  uint64_t budget = 0;     // usable - margin (0 when the margin is more)
  uint64_t weight_bytes = 0, kv_bytes = 0;  // what the plan puts on the GPU (fixed_bytes included)

  bool head_on_gpu() const { return n_gpu_layers > n_layer; }
  int layers_on_gpu() const { return n_gpu_layers < n_layer ? n_gpu_layers : n_layer; }
  // The flags that ask for this placement by hand: "-ngl 17", "-ngl 49 -ncmoe 20".
  std::string flags() const;
};

// 0.75 GiB + 5% of `usable` (the rule above).
uint64_t fit_margin(uint64_t usable);

// The placement (the rule above). Pure: no GPU is asked anything.
FitPlan plan_gpu_fit(const FitInput& in);

// One line for the user: what went where and the budget behind it, e.g.
// "fit: 17 of 32 layers on CUDA0, output head on the CPU (-ngl 17): weights
// 4.10 GiB + KV cache 0.25 GiB of a 4.39 GiB budget (5.00 GiB free, less a
// 0.61 GiB margin for activations and scratch)".
std::string describe_fit(const FitPlan& plan, const FitInput& in, const std::string& device);

}  // namespace weir
