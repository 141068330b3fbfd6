#pragma once
// Thread-block clusters (Hopper and later): the block's rank in its
// cluster, the cluster-wide barrier, and another block's shared memory.
// Kernels that use them are launched in clusters only on such devices
// (launch_kernel_in_clusters); built for an older architecture they trap.
#include <cuda_runtime.h>

#include <cstdint>

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

}  // namespace weir::cuda
