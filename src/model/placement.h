// Where a model's weights live and where each layer runs, decided once at
// load from -ngl and -ot as llama.cpp decides it:
//  - -ngl N puts the last N repeating layers on the GPUs (devices[1..]), and
//    the output head (output norm and matrix) too when N > the layer count;
//    the input embedding stays on the CPU. With several GPUs (layer split,
//    -sm layer) the layers go to them in order, consecutive layers on one
//    GPU, in the proportions of `split` (--tensor-split; default equal);
//    the head goes with the last layer, the embedding (with every layer on
//    the GPUs) with the first.
//  - -ot REGEX=DEV (--override-tensor; several allowed, the first whose
//    REGEX is found in a tensor's name wins) puts any weight on DEV.
//  - A layer's KV cache and attention live where its K projection does.
#pragma once
#include <cstdint>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "model/model.h"
#include "sched/scheduler.h"

namespace weir {

struct TensorOverride {
  std::string pattern;  // as given, for messages
  std::regex re;
  std::string device;   // "CPU", "CUDA0", ...
};

// The layer of a tensor named "blk.N....", or -1 (the embedding, the head).
int64_t tensor_layer(std::string_view name);

// "REGEX=DEV" (-ot), checked: a bad regex or a missing '=' throws Error
// naming the flag's value.
TensorOverride parse_tensor_override(const std::string& text);

struct PlacementRequest {
  int n_gpu_layers = 0;
  std::vector<TensorOverride> overrides;
  std::vector<double> split;  // a share per GPU (devices[1..]); empty: equal
};

struct ModelPlacement {
  std::vector<std::string> devices;   // backend index -> name; [0] is the CPU
  std::vector<int> tensor_home;       // by the file's tensor index
  std::vector<int> layer;             // per layer: attention and KV cache
  int input = 0, output = 0;          // the embedding lookup, the output head
  std::vector<uint64_t> weight_bytes;  // per device

  // Whether everything runs on one device (no scheduler needed).
  bool single_device() const;
  // The scheduler's view: homes by the weights' data pointers.
  sched::Placement for_scheduler(const Model& m) const;
  // "CPU 2.41 GiB (layers 0-15, embedding), CUDA0 2.52 GiB (layers 16-31)".
  std::string summary() const;
};

// Throws Error naming the flag for an unknown device or an impossible request.
ModelPlacement place_model(const Model& m, const std::vector<std::string>& devices, const PlacementRequest& r);

}  // namespace weir
