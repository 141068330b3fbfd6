// The backend registry of a build with CUDA.
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/cuda_backend.h"
#include "backend/registry.h"

namespace weir {

// Puts the calling thread's current device back as it was: these queries
// run on threads that already work with a GPU of their own (a process under
// mpirun on GPU 1 measured GPU 0's bandwidth and was left on GPU 0).
struct KeepCurrentDevice {
  int device = -1;
  KeepCurrentDevice() {
    if (cudaGetDevice(&device) != cudaSuccess) cudaGetLastError(), device = -1;
  }
  ~KeepCurrentDevice() {
    if (device >= 0) cudaSetDevice(device);
  }
};

bool cuda_built() { return true; }

std::string cuda_build_info() {
  return "toolkit " + std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10) + ", " +
         WEIR_CUDA_ARCH_LIST;
}

std::vector<GpuInfo> cuda_devices(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = e != cudaSuccess ? std::string("no usable CUDA driver or device (") + cudaGetErrorString(e) + ")"
                                     : std::string("no CUDA device");
    cudaGetLastError();
    return {};
  }
  std::vector<GpuInfo> out;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    GpuInfo g;
    g.index = i;
    g.name = p.name;
    g.cc_major = p.major;
    g.cc_minor = p.minor;
    g.sm_count = p.multiProcessorCount;
    g.total_bytes = p.totalGlobalMem;
    int clock_khz = 0, bus_bits = 0;
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, i);
    cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, i);
    g.peak_gbps = 2.0 * double(clock_khz) * 1e3 * double(bus_bits) / 8.0 / 1e9;  // double data rate
    out.push_back(g);
  }
  cudaGetLastError();
  return out;
}

void cuda_enable_peer_access(const std::vector<int>& devices) {
  const KeepCurrentDevice keep;
  for (int a : devices)
    for (int b : devices) {
      if (a == b) continue;
      int can = 0;
      if (cudaDeviceCanAccessPeer(&can, a, b) != cudaSuccess || !can) {
        cudaGetLastError();
        continue;
      }
      cudaSetDevice(a);
      cudaDeviceEnablePeerAccess(b, 0);  // already enabled: fine
      cudaGetLastError();
    }
}

size_t cuda_free_bytes(int device) {
  const KeepCurrentDevice keep;
  size_t free = 0, total = 0;
  if (cudaSetDevice(device) != cudaSuccess || cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return free;
}

double measure_gpu_bandwidth(int device) {
  const KeepCurrentDevice keep;
  if (cudaSetDevice(device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  const size_t n = size_t(512) << 20;
  void *a = nullptr, *b = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  double best = 0;
  if (cudaMalloc(&a, n) == cudaSuccess && cudaMalloc(&b, n) == cudaSuccess && cudaEventCreate(&e0) == cudaSuccess &&
      cudaEventCreate(&e1) == cudaSuccess) {
    cudaMemset(a, 1, n);
    cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);  // warm up
    for (int rep = 0; rep < 5; ++rep) {
      cudaEventRecord(e0);
      for (int i = 0; i < 4; ++i) cudaMemcpy(i % 2 ? a : b, i % 2 ? b : a, n, cudaMemcpyDeviceToDevice);
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      if (ms > 0) best = std::max(best, 4.0 * 2.0 * double(n) / (double(ms) * 1e-3));
    }
  }
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  if (a) cudaFree(a);
  if (b) cudaFree(b);
  cudaGetLastError();
  return best;
}

std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& o) { return std::make_unique<cuda::CudaBackend>(o); }

}  // namespace weir
