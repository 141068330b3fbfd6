#include "model/placement.h"

#include <algorithm>
#include <cstdio>
#include <unordered_map>

#include "core/error.h"

namespace weir {

int64_t tensor_layer(std::string_view name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  int64_t n = 0;
  size_t i = 4;
  if (i >= name.size() || name[i] < '0' || name[i] > '9') return -1;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) n = n * 10 + (name[i] - '0');
  return i < name.size() && name[i] == '.' ? n : -1;
}

namespace {

int device_index(const std::vector<std::string>& devices, const std::string& name, const std::string& flag) {
  for (size_t i = 0; i < devices.size(); ++i)
    if (devices[i] == name) return int(i);
  std::string have;
  for (const std::string& d : devices) have += (have.empty() ? "" : ", ") + d;
  throw Error(flag + ": no device " + name + " here (devices: " + have + ")");
}

}  // namespace

TensorOverride parse_tensor_override(const std::string& text) {
  const size_t eq = text.rfind('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    throw Error("-ot '" + text + "': expected REGEX=DEVICE, e.g. \"ffn_.*=CPU\"");
  TensorOverride o;
  o.pattern = text.substr(0, eq);
  o.device = text.substr(eq + 1);
  try {
    o.re = std::regex(o.pattern, std::regex::ECMAScript | std::regex::optimize);
  } catch (const std::regex_error& e) {
    throw Error("-ot '" + text + "': '" + o.pattern + "' is not a regular expression (" + e.what() + ")");
  }
  return o;
}

ModelPlacement place_model(const Model& m, const std::vector<std::string>& devices, const PlacementRequest& r) {
  if (devices.empty() || devices[0] != "CPU") throw Error("placement: the first device must be the CPU");
  const int64_t n_layer = m.hparams().n_layer;
  if (r.n_gpu_layers < 0) throw Error("-ngl: expected 0 or more layers, got " + std::to_string(r.n_gpu_layers));
  if (r.n_gpu_layers > 0 && devices.size() < 2)
    throw Error("-ngl " + std::to_string(r.n_gpu_layers) + ": no GPU to put layers on");
  ModelPlacement p;
  p.devices = devices;
  const int gpu = devices.size() > 1 ? 1 : 0;
  const int n_gpus = int(devices.size()) - 1;
  const int64_t first_gpu_layer = n_layer - std::min<int64_t>(r.n_gpu_layers, n_layer);
  // Which GPU a layer on the GPUs goes to: consecutive runs of layers, in
  // the requested proportions.
  std::vector<double> share(size_t(std::max(n_gpus, 1)), 1.0);
  if (!r.split.empty()) {
    if (int(r.split.size()) != n_gpus)
      throw Error("--tensor-split: " + std::to_string(r.split.size()) + " shares for " + std::to_string(n_gpus) + " GPUs");
    double sum = 0;
    for (double x : r.split) {
      if (!(x >= 0)) throw Error("--tensor-split: shares must be 0 or more");
      sum += x;
    }
    if (!(sum > 0)) throw Error("--tensor-split: the shares add up to nothing");
    share = r.split;
  }
  const int64_t n_on_gpu = n_layer - first_gpu_layer;
  auto gpu_of_layer = [&](int64_t il) {
    if (n_gpus <= 1) return gpu;
    double total = 0;
    for (double x : share) total += x;
    const double at = double(il - first_gpu_layer) + 0.5;  // the layer's middle
    double end = 0;
    for (int k = 0; k < n_gpus; ++k) {
      end += share[size_t(k)] / total * double(n_on_gpu);
      if (at < end) return k + 1;
    }
    return n_gpus;
  };
  // All layers and the head on the GPU: the embedding too (one device, no
  // copies); otherwise it stays on the CPU, as llama.cpp keeps it.
  const bool all = r.n_gpu_layers > n_layer;
  p.output = all ? (n_gpus > 1 ? gpu_of_layer(n_layer - 1) : gpu) : 0;
  p.input = all ? (n_gpus > 1 ? gpu_of_layer(first_gpu_layer) : gpu) : 0;
  std::vector<int> overrides;
  for (const TensorOverride& o : r.overrides) overrides.push_back(device_index(devices, o.device, "-ot"));
  const auto& tensors = m.file().tensors();
  p.tensor_home.assign(tensors.size(), 0);
  p.weight_bytes.assign(devices.size(), 0);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string name(tensors[i].name);
    const int64_t il = tensor_layer(name);
    int home = 0;
    if (il >= 0) home = il >= first_gpu_layer ? gpu_of_layer(il) : 0;
    else if (name.rfind("output", 0) == 0) home = p.output;  // output.weight, output_norm.weight
    else home = p.input;  // token_embd, rope_freqs
    for (size_t k = 0; k < r.overrides.size(); ++k)
      if (std::regex_search(name, r.overrides[k].re)) {
        home = overrides[k];
        break;
      }
    p.tensor_home[i] = home;
    p.weight_bytes[size_t(home)] += tensors[i].nbytes;
  }
  // The head where its matrix lives (a tied one: where the output norm
  // does), the embedding lookup where the table does: -ot may have moved them.
  auto home_of = [&](std::string_view name, int fallback) {
    for (size_t i = 0; i < tensors.size(); ++i)
      if (tensors[i].name == name) return p.tensor_home[i];
    return fallback;
  };
  p.output = home_of("output.weight", home_of("output_norm.weight", p.output));
  p.input = home_of("token_embd.weight", p.input);
  // Each layer's attention where its K projection lives (else its Q, or phi3's fused QKV).
  p.layer.assign(size_t(n_layer), 0);
  for (int64_t il = 0; il < n_layer; ++il) {
    p.layer[size_t(il)] = il >= first_gpu_layer ? gpu_of_layer(il) : 0;
    for (const char* w : {"attn_q.weight", "attn_qkv.weight", "attn_k.weight"}) {
      const std::string name = "blk." + std::to_string(il) + "." + w;
      for (size_t i = 0; i < tensors.size(); ++i)
        if (tensors[i].name == name) p.layer[size_t(il)] = p.tensor_home[i];
    }
  }
  return p;
}

bool ModelPlacement::single_device() const {
  int only = -1;
  auto same = [&](int d) {
    if (only < 0) only = d;
    return only == d;
  };
  bool one = same(input) && same(output);
  for (int d : tensor_home) one = one && same(d);
  for (int d : layer) one = one && same(d);
  return one;
}

sched::Placement ModelPlacement::for_scheduler(const Model& m) const {
  std::unordered_map<const void*, int> home;
  const void* embedding = nullptr;
  const auto& tensors = m.file().tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    home[tensors[i].data] = tensor_home[i];
    if (tensors[i].name == "token_embd.weight") embedding = tensors[i].data;
  }
  sched::Placement s;
  const int out = output;
  s.weight_home = [home = std::move(home), embedding, out](const Tensor& node, const Tensor& leaf) {
    // A tied embedding read as the output matrix lives where the output head does.
    if (leaf.data == embedding && node.op == Op::MulMat) return out;
    auto it = home.find(leaf.data);
    return it == home.end() ? sched::kHost : it->second;
  };
  s.layer_backend = layer;
  s.output_backend = output;
  // The host's matrices, for op offload: one span and the largest.
  const uint8_t *lo = nullptr, *hi = nullptr;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensor_home[i] != 0 || tensors[i].n_dims < 2) continue;
    s.largest_host_weight = std::max(s.largest_host_weight, tensors[i].nbytes);
    if (!lo || tensors[i].data < lo) lo = tensors[i].data;
    if (!hi || tensors[i].data + tensors[i].nbytes > hi) hi = tensors[i].data + tensors[i].nbytes;
  }
  s.host_weights = lo;
  s.host_weights_bytes = size_t(hi - lo);
  return s;
}

std::string ModelPlacement::summary() const {
  std::string s;
  for (size_t d = 0; d < devices.size(); ++d) {
    if (!weight_bytes[d] && d != 0) continue;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s %.2f GiB", devices[d].c_str(), double(weight_bytes[d]) / (1 << 30));
    s += (s.empty() ? "" : ", ") + std::string(buf);
    int64_t lo = -1, hi = -1, count = 0;
    for (size_t il = 0; il < layer.size(); ++il)
      if (layer[il] == int(d)) {
        if (lo < 0) lo = int64_t(il);
        hi = int64_t(il);
        ++count;
      }
    std::string what;
    if (count == 1) what = "layer " + std::to_string(lo);
    else if (count) what = count == hi - lo + 1 ? "layers " + std::to_string(lo) + "-" + std::to_string(hi)
                                                : std::to_string(count) + " layers";
    if (input == int(d)) what += std::string(what.empty() ? "" : ", ") + "embedding";
    if (output == int(d)) what += std::string(what.empty() ? "" : ", ") + "output";
    if (!what.empty()) s += " (" + what + ")";
  }
  return s;
}

}  // namespace weir
