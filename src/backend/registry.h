// Which backends this build and machine offer, and how to make them. The
// one place that knows whether weir was built with CUDA: the answer comes
// from backend/cuda/cuda_registry.cpp or, in a build without CUDA, from
// backend/no_cuda/registry_stub.cpp.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda_options.h"

namespace weir {

struct GpuInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;  // compute capability
  int sm_count = 0;
  size_t total_bytes = 0;
  double peak_gbps = 0;  // memory bandwidth from clock and bus width (datasheet-like)
};

// Whether this build has the CUDA backend.
bool cuda_built();
// What the CUDA backend was built with ("toolkit 13.0, sm_80 sm_90"), or why
// there is none.
std::string cuda_build_info();
// The GPUs weir can use now; empty with *why saying why (no CUDA in the
// build, no driver, no device).
std::vector<GpuInfo> cuda_devices(std::string* why = nullptr);

// Free memory on GPU `device` now (it makes the device current); 0 without one.
size_t cuda_free_bytes(int device);
// Lets each of these GPUs read and write the others' memory directly (a
// layer split's activations pass by peer copies); pairs that cannot are
// left to staged copies.
void cuda_enable_peer_access(const std::vector<int>& devices);

// Device memory bandwidth of GPU `device` in bytes/s, measured by a few
// large device-to-device copies (bytes read + bytes written over the time),
// the figure a decode step's bytes are held against; 0 without a GPU.
double measure_gpu_bandwidth(int device);

// A CUDA backend on options.device; throws weir::Error saying why not (no
// such device, no CUDA in this build).
std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& options);

}  // namespace weir
