#include "engine/gpu_fit.h"

#include <algorithm>

#include "core/units.h"

namespace weir {

std::string FitPlan::flags() const {
  std::string s = "-ngl " + std::to_string(n_gpu_layers);
  if (cpu_moe) s += " -cmoe";
  else if (n_cpu_moe > 0) s += " -ncmoe " + std::to_string(n_cpu_moe);
  return s;
}

uint64_t fit_margin(uint64_t usable) { return (uint64_t(768) << 20) + usable / 20; }

FitPlan plan_gpu_fit(const FitInput& in) {
  FitPlan p;
  const int n = int(in.layer_bytes.size());
  p.n_layer = n;
  p.usable = in.cap_bytes > 0 ? std::min(in.free_bytes, in.cap_bytes) : in.free_bytes;
  p.budget = p.usable > in.margin_bytes ? p.usable - in.margin_bytes : 0;
  auto expert = [&](int il) { return size_t(il) < in.expert_bytes.size() ? in.expert_bytes[size_t(il)] : 0; };
  uint64_t experts = 0, others = 0;
  for (int il = 0; il < n; ++il) experts += expert(il), others += in.layer_bytes[size_t(il)];
  p.moe = experts > 0;

  p.weight_bytes = in.fixed_bytes;  // -ot's GPU weights go there whatever fits
  auto used = [&] { return p.weight_bytes + p.kv_bytes; };
  auto fits = [&](uint64_t more) { return used() <= p.budget && more <= p.budget - used(); };
  // Whole layers from the last backwards (with or without their experts);
  // the head only when every layer is on the GPU.
  auto take_layers = [&](bool with_experts) {
    int k = 0;
    for (int il = n - 1; il >= 0; --il) {
      const uint64_t w = in.layer_bytes[size_t(il)] + (with_experts ? expert(il) : 0);
      if (!fits(w + in.kv_bytes_per_layer)) break;
      p.weight_bytes += w;
      p.kv_bytes += in.kv_bytes_per_layer;
      ++k;
    }
    p.n_gpu_layers = k;
    if (k == n && fits(in.head_bytes)) {
      p.weight_bytes += in.head_bytes;
      p.n_gpu_layers = n + 1;
    }
  };
  if (!p.moe) {
    take_layers(true);
    return p;
  }
  // Mixture of experts: everything but the experts first.
  if (fits(others + uint64_t(n) * in.kv_bytes_per_layer + in.head_bytes)) {
    p.weight_bytes += others + in.head_bytes;
    p.kv_bytes += uint64_t(n) * in.kv_bytes_per_layer;
    p.n_gpu_layers = n + 1;
    int first_on_gpu = n;  // the experts of layers first_on_gpu.. go to the GPU
    for (int il = n - 1; il >= 0 && fits(expert(il)); --il) {
      p.weight_bytes += expert(il);
      first_on_gpu = il;
    }
    p.cpu_moe = first_on_gpu == n;
    p.n_cpu_moe = p.cpu_moe ? 0 : first_on_gpu;
    return p;
  }
  p.cpu_moe = true;
  take_layers(false);
  return p;
}

std::string describe_fit(const FitPlan& p, const FitInput& in, const std::string& device) {
  std::string budget = "a " + gib(double(p.budget)) + " budget (" +
                       (in.cap_bytes > 0 && in.cap_bytes < in.free_bytes
                            ? "--fit-vram " + gib(double(in.cap_bytes)) + " of " + gib(double(in.free_bytes)) + " free"
                            : gib(double(in.free_bytes)) + " free") +
                       ", less a " + gib(double(in.margin_bytes)) + " margin for activations and scratch)";
  if (p.n_gpu_layers == 0 && p.weight_bytes == 0) {
    std::string need;
    if (p.n_layer > 0) {
      // (a dense layer's experts are none; a MoE model's stay on the CPU)
      const uint64_t last = in.layer_bytes.back() + in.kv_bytes_per_layer;
      need = "; the last layer needs " + gib(double(last)) + " with its KV cache";
    }
    return "fit: no layer fits " + device + " (" + budget + need + "): everything on the CPU";
  }
  std::string s = "fit: ";
  if (p.head_on_gpu()) s += "all " + std::to_string(p.n_layer) + " layers and the output head on " + device;
  else s += std::to_string(p.n_gpu_layers) + " of " + std::to_string(p.n_layer) + " layers on " + device +
            ", output head on the CPU";
  if (p.cpu_moe && p.moe) s += ", every layer's experts on the CPU";
  else if (p.n_cpu_moe > 0) s += ", the experts of the first " + std::to_string(p.n_cpu_moe) + " layers on the CPU";
  s += " (" + p.flags() + "): weights " + gib(double(p.weight_bytes)) + " + KV cache " + gib(double(p.kv_bytes)) +
       " of " + budget;
  return s;
}

}  // namespace weir
