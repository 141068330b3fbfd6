// Small pieces shared by the CUDA kernels (not an interface).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include "backend/cuda/pdl.h"
#include "core/error.h"
#include "core/tensor.h"

namespace weir::cuda {

// Tensor strides for kernels: row r of a [ne0, ne1, ne2, ne3] tensor is at
// byte offset (r % ne1) * nb1 + (r / ne1 % ne2) * nb2 + (r / (ne1 ne2)) * nb3.
struct Rows {
  const char* base;
  int64_t ne1, ne2;
  int64_t nb1, nb2, nb3;
  __device__ __forceinline__ const char* row(int64_t r) const {
    const int64_t i1 = r % ne1, i2 = (r / ne1) % ne2, i3 = r / (ne1 * ne2);
    return base + i1 * nb1 + i2 * nb2 + i3 * nb3;
  }
};
inline Rows rows_of(const Tensor& t) {
  return {static_cast<const char*>(t.data), t.ne[1], t.ne[2], int64_t(t.nb[1]), int64_t(t.nb[2]), int64_t(t.nb[3])};
}

inline std::string shape_of(const Tensor& t) {
  return t.name + "[" + std::to_string(t.ne[0]) + "," + std::to_string(t.ne[1]) + "," + std::to_string(t.ne[2]) + "," +
         std::to_string(t.ne[3]) + "]";
}

[[noreturn]] inline void bad_operands(const char* op, const Tensor& dst, const std::string& why) {
  throw Error(std::string("cuda ") + op + " " + dst.name + ": " + why);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The end of a row-per-warp product: each warp's per-token partial sums of
// its R rows (acc[r][t]) reduced over the WARPS_PER_ROW warps of a row
// (shared memory when more than one). True in the one thread that then holds
// the rows' sums in acc. Every thread of the block calls it.
template <int TOKENS, int WARPS_PER_ROW, int WARPS, int R>
__device__ __forceinline__ bool reduce_row_sums(float (&acc)[R][TOKENS], int warp, int lane) {
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) acc[r][t] = warp_sum(acc[r][t]);
  if constexpr (WARPS_PER_ROW > 1) {
    __shared__ float part[WARPS][R][TOKENS];
    if (lane == 0)
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < TOKENS; ++t) part[warp][r][t] = acc[r][t];
    __syncthreads();
    if (warp % WARPS_PER_ROW != 0 || lane != 0) return false;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < TOKENS; ++t) {
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < WARPS_PER_ROW; ++j) s += part[warp + j][r][t];
        acc[r][t] = s;
      }
    return true;
  }
  return lane == 0;
}

// reduce_row_sums, then the sums stored to y[r][t * ldy[r]] where live[r].
template <int TOKENS, int WARPS_PER_ROW, int WARPS, int R>
__device__ __forceinline__ void store_row_sums(float (&acc)[R][TOKENS], int warp, int lane, const bool (&live)[R],
                                               float* const (&y)[R], const int64_t (&ldy)[R]) {
  if (!reduce_row_sums<TOKENS, WARPS_PER_ROW, WARPS, R>(acc, warp, lane)) return;
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (live[r])
#pragma unroll
      for (int t = 0; t < TOKENS; ++t) y[r][t * ldy[r]] = acc[r][t];
}

inline unsigned blocks_for(int64_t n, int per_block) { return unsigned((n + per_block - 1) / per_block); }

// Programmatic dependent launch (Hopper): kernels are launched allowed to
// start before the kernel ahead of them on the stream has finished, so a
// launch's latency overlaps the tail of the one before. Every kernel of
// this backend calls pdl_wait() before it reads anything an earlier kernel
// may write (first, or after loading weights only): it lets the next kernel
// launch, then waits until the previous grid has completed and its writes
// are visible.
// WEIR_CUDA_PDL=0 turns it off (for comparisons).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Warps per SM a decode product aims to have in flight when it picks how
// many warps share a row: `dflt` (each kernel's measured best) unless the
// options say otherwise (CudaOptions::decode_warps_per_sm, for tuning).
inline int mat_vec_warps_per_sm(int dflt, int option) { return option > 0 ? option : dflt; }

// Decode products load their first weights before pdl_wait() when no kernel
// of the graph writes them (OpCtx::weights_constant) and CudaOptions::early_weights is on
// (early loads gave 8B q4_K decode +3% and 1B q4_0 +5% on an H100).

// Kernel's attributes (registers, local memory), asked of the runtime once.
template <auto Kernel>
const cudaFuncAttributes& kernel_attributes() {
  static const cudaFuncAttributes a = [] {
    cudaFuncAttributes r{};
    const cudaError_t e = cudaFuncGetAttributes(&r, Kernel);
    if (e != cudaSuccess) throw Error(std::string("CUDA: kernel attributes: ") + cudaGetErrorString(e));
    return r;
  }();
  return a;
}

// Blocks of Kernel that one SM holds at once, of `threads` threads (the
// same at every call) and no dynamic shared memory; asked of the runtime
// once, for the device current then.
template <auto Kernel>
int resident_blocks(int threads) {
  static const int n = [threads] {
    int b = 0;
    const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, Kernel, threads, 0);
    if (e != cudaSuccess) throw Error(std::string("CUDA: occupancy query failed: ") + cudaGetErrorString(e));
    return b;
  }();
  return n;
}

// Lets `kernel` take `bytes` of dynamic shared memory (beyond the default
// 48 KB) on the current device. The limit is a per-device attribute: set
// once for each (kernel, device) pair, not once a process (a second GPU
// would refuse the launch with "invalid argument").
void allow_dynamic_smem(const void* kernel, int bytes);

// kernel<<<grid, block, smem, on.stream>>>(args...), with programmatic
// dependent launch where on.pdl says (OpCtx::launch_stream()), in
// thread-block clusters of `cluster` blocks where that is not (1, 1, 1);
// launch errors throw.
template <class... Params, class... Args>
void launch_kernel_in_clusters(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, LaunchStream on,
                               dim3 cluster, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = on.stream;
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (on.pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster.x * cluster.y * cluster.z > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster.x, attr[n].val.clusterDim.y = cluster.y, attr[n++].val.clusterDim.z = cluster.z;
  }
  cfg.attrs = n ? attr : nullptr;
  cfg.numAttrs = n;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  if (e != cudaSuccess) throw Error(std::string("CUDA: kernel launch failed: ") + cudaGetErrorString(e));
}

template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, LaunchStream on, Args&&... args) {
  launch_kernel_in_clusters(kernel, grid, block, smem, on, dim3(1, 1, 1), std::forward<Args>(args)...);
}

}  // namespace weir::cuda
