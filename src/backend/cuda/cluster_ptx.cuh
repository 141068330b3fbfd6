#pragma once
// Thread-block clusters (Hopper and later): the block's rank in its
// cluster, the cluster-wide barrier, and another block's shared memory;
// on the host, whether the device has clusters and how many it holds.
// Kernels that use them are launched in clusters only on such devices
// (launch_kernel_in_clusters); built for an older architecture they trap.
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "backend/cuda/pdl.h"

namespace weir::cuda {

__device__ __forceinline__ unsigned cluster_rank() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
#else
  return 0;
#endif
}

// Every thread of every block of the cluster arrives and waits: shared
// memory written before it is visible to the cluster's blocks after it, and
// no block leaves while another may still read its shared memory.
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
  __trap();
#endif
}

// The address of `p` (this block's shared memory) in block `rank`'s shared
// memory, for ordinary loads (distributed shared memory).
template <class T>
__device__ __forceinline__ const T* cluster_peer(const T* p, unsigned rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint64_t r;
  asm("mapa.u64 %0, %1, %2;" : "=l"(r) : "l"(reinterpret_cast<uint64_t>(p)), "r"(rank));
  return reinterpret_cast<const T*>(r);
#else
  (void)rank;
  __trap();
  return p;
#endif
}

// Whether the current device has thread-block clusters.
inline bool clusters_supported() { return hopper_or_later(); }

// Clusters of `cs` blocks of Kernel (`threads` threads and `smem` bytes of
// dynamic shared memory each) that the current device holds at once, asked
// of the runtime once per device and cluster size; 0 where the device has
// no clusters or the runtime cannot say. Attributes the launch needs (more
// shared memory, a non-portable size) are set before the first call.
template <auto Kernel>
int active_clusters(unsigned threads, size_t smem, int cs) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, int> known;
  int dev = 0;
  if (!clusters_supported() || cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(dev, cs);
  if (auto it = known.find(key); it != known.end()) return it->second;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(cs));
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = unsigned(cs), attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, Kernel, &cfg) != cudaSuccess) {
    cudaGetLastError();
    n = 0;
  }
  known[key] = n;
  return n;
}

}  // namespace weir::cuda
