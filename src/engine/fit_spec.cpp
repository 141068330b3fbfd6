// fit_spec: --fit's inputs gathered from the model and the GPU (weights per
// layer, experts apart; the KV cache a layer needs; the GPU's free memory),
// handed to the pure rule of engine/gpu_fit.h, and its answer written back
// into the spec as the -ngl / --n-cpu-moe / --cpu-moe it stands for.
#include <algorithm>

#include "backend/registry.h"
#include "core/error.h"
#include "engine/runtime.h"
#include "model/kv_cache.h"
#include "model/placement.h"

namespace weir {
namespace {

// What --fit cannot do yet: place over several GPUs.
void check_one_gpu(const RuntimeSpec& s) {
  std::string why;
  if (s.world) why = "this process is one rank under mpirun";
  else if (s.tp > 1) why = "--tp " + std::to_string(s.tp);
  else if (s.devices.size() > 1) why = "--device lists " + std::to_string(s.devices.size()) + " GPUs";
  else if (s.split_mode == "layer" || s.split_mode == "tensor") why = "-sm " + s.split_mode;
  if (!why.empty())
    throw UsageError("--fit (-ngl auto) fits the model to one GPU for now, and " + why +
                     " asks for several; give -ngl N (and -ts) for a split");
}

}  // namespace

FitInput fit_input(const Model& m, const RuntimeSpec& s, const std::string& device) {
  std::vector<TensorOverride> rules;
  for (const std::string& o : s.overrides) rules.push_back(parse_tensor_override(o));
  for (const std::string& o : cpu_expert_overrides(m, s.cpu_moe, s.n_cpu_moe)) rules.push_back(parse_tensor_override(o));
  const std::vector<std::string> experts = cpu_expert_overrides(m, true, 0);  // the expert weights, by name
  const bool moe = !experts.empty();
  const TensorOverride expert_rule = parse_tensor_override(moe ? experts[0] : "^$=CPU");
  const int64_t n_layer = m.hparams().n_layer;
  FitInput in;
  in.layer_bytes.assign(size_t(n_layer), 0);
  if (moe) in.expert_bytes.assign(size_t(n_layer), 0);
  for (const GGUFTensorInfo& t : m.file().tensors()) {
    const std::string name(t.name);
    const TensorOverride* rule = nullptr;
    for (const TensorOverride& r : rules)
      if (std::regex_search(name, r.re)) {
        rule = &r;
        break;
      }
    if (rule) {
      if (rule->device == device) in.fixed_bytes += t.nbytes;
      continue;  // on the CPU (or another GPU): not the fit's to place
    }
    // Layers past n_layer (next-token prediction heads) go with the GPU's
    // layers, as place_model puts them: with the last one.
    const int64_t il = std::min(tensor_layer(name), n_layer - 1);
    if (il < 0) in.head_bytes += t.nbytes;
    else if (moe && std::regex_search(name, expert_rule.re)) in.expert_bytes[size_t(il)] += t.nbytes;
    else in.layer_bytes[size_t(il)] += t.nbytes;
  }
  in.kv_bytes_per_layer = uint64_t(KVCache::bytes_for(m.hparams(), s.kv_type, std::max<int64_t>(s.n_ctx, 1), 1));
  in.cap_bytes = s.fit_vram;
  return in;
}

RuntimeSpec fit_spec(const Model& m, const RuntimeSpec& spec, FitPlan* plan, std::string* report) {
  check_one_gpu(spec);
  RuntimeSpec s = spec;
  s.fit = false;
  s.n_gpu_layers = 0;
  s.split_mode = "none";  // one GPU: no layer split when the share is near its free memory
  *plan = FitPlan{};
  plan->n_layer = int(m.hparams().n_layer);
  std::string why;
  const auto gpus = cuda_devices(&why);
  if (gpus.empty()) {
    if (spec.kv_type_default) s.kv_type = default_kv_type(0);
    *report = "fit: no GPU (" + why + "): everything on the CPU";
    return s;
  }
  const int dev = spec.devices.empty() ? spec.main_gpu : spec.devices[0];
  if (dev < 0 || dev >= int(gpus.size()))
    throw UsageError(std::string(spec.devices.empty() ? "-mg " : "--device ") + std::to_string(dev) + ": there " +
                     (gpus.size() == 1 ? "is 1 GPU" : "are " + std::to_string(gpus.size()) + " GPUs") + " (0.." +
                     std::to_string(gpus.size() - 1) + ")");
  const std::string device = "CUDA" + std::to_string(dev);
  FitInput in = fit_input(m, s, device);
  in.free_bytes = cuda_free_bytes(dev);
  in.margin_bytes = fit_margin(in.cap_bytes > 0 ? std::min(in.free_bytes, in.cap_bytes) : in.free_bytes);
  *plan = plan_gpu_fit(in);
  *report = describe_fit(*plan, in, device);
  s.n_gpu_layers = plan->n_gpu_layers;
  if (spec.kv_type_default) s.kv_type = default_kv_type(s.n_gpu_layers);
  if (plan->cpu_moe) s.cpu_moe = true;
  s.n_cpu_moe = std::max(s.n_cpu_moe, plan->n_cpu_moe);
  return s;
}

}  // namespace weir
