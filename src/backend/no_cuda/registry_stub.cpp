// The backend registry of a build without CUDA (CMake found no nvcc, or
// -DWEIR_CUDA=OFF).
#include "backend/registry.h"
#include "core/error.h"

namespace weir {

bool cuda_built() { return false; }

std::string cuda_build_info() { return "not built (no nvcc found, or -DWEIR_CUDA=OFF)"; }

std::vector<GpuInfo> cuda_devices(std::string* why) {
  if (why) *why = "this weir was built without CUDA (no nvcc found, or -DWEIR_CUDA=OFF)";
  return {};
}

double measure_gpu_bandwidth(int) { return 0; }

size_t cuda_free_bytes(int) { return 0; }
void cuda_enable_peer_access(const std::vector<int>&) {}

std::unique_ptr<Backend> make_cuda_backend(const CudaOptions&) {
  throw Error("this weir was built without CUDA (no nvcc found, or -DWEIR_CUDA=OFF): cannot use a GPU");
}

}  // namespace weir
