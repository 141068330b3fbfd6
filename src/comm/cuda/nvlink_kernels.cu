#include "comm/cuda/nvlink_kernels.h"


#include "core/collective.h"
#include "core/error.h"

namespace weir::comm_cuda {
namespace {

constexpr int kThreads = 512;

__device__ __forceinline__ uint32_t load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_release(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// The call's number for block b (the same on every rank: every rank makes
// the same calls in the same order).
__device__ __forceinline__ uint32_t next_epoch(const NvlinkPeers& p, uint32_t* shared) {
  if (threadIdx.x == 0) *shared = p.epochs[blockIdx.x] + 1;
  __syncthreads();
  return *shared;
}

// Raises this block's flag on every rank once every thread's writes are
// visible system wide, then waits for every rank's flag here.
__device__ __forceinline__ void exchange_flags(const NvlinkPeers& p, uint32_t epoch) {
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x < p.size) {
    const int q = threadIdx.x;
    store_release(p.flags[q] + p.rank * kMaxBlocks + blockIdx.x, epoch);
    const uint32_t* mine = p.flags[p.rank] + q * kMaxBlocks + blockIdx.x;
    const long long start = clock64();
    while (load_acquire(mine) < epoch)
      if (p.timeout_cycles > 0 && clock64() - start > p.timeout_cycles) __trap();  // a rank never came
  }
  __syncthreads();
}

__device__ __forceinline__ void chunk_of(size_t n, size_t* begin, size_t* end) {
  const size_t per = (n + gridDim.x - 1) / gridDim.x;
  *begin = min(n, size_t(blockIdx.x) * per);
  *end = min(n, *begin + per);
}

__global__ void __launch_bounds__(kThreads) all_reduce_kernel(NvlinkPeers p, const float* __restrict__ src,
                                                              float* __restrict__ dst, size_t n) {
  __shared__ uint32_t epoch_s;
  const uint32_t epoch = next_epoch(p, &epoch_s);
  const size_t half = size_t(epoch & 1u) * size_t(p.size) * p.cap;
  size_t b0, b1;
  chunk_of(n, &b0, &b1);
  for (int q = 0; q < p.size; ++q) {
    float* slot = p.recv[q] + half + size_t(p.rank) * p.cap;
    for (size_t i = b0 + threadIdx.x; i < b1; i += blockDim.x) slot[i] = src[i];
  }
  exchange_flags(p, epoch);
  const float* mine = p.recv[p.rank] + half;
  for (size_t i = b0 + threadIdx.x; i < b1; i += blockDim.x) {
    float s = __ldcg(mine + i);
    for (int q = 1; q < p.size; ++q) s += __ldcg(mine + size_t(q) * p.cap + i);
    dst[i] = s;
  }
  if (threadIdx.x == 0) p.epochs[blockIdx.x] = epoch;
}

__global__ void __launch_bounds__(kThreads) all_gather_kernel(NvlinkPeers p, const float* __restrict__ src,
                                                              size_t src_ld, float* __restrict__ dst, size_t dst_ld,
                                                              int64_t total, int64_t cols) {
  __shared__ uint32_t epoch_s;
  const uint32_t epoch = next_epoch(p, &epoch_s);
  const size_t half = size_t(epoch & 1u) * size_t(p.size) * p.cap;
  // This rank's part, flattened column by column: element e is row e % rows
  // of column e / rows.
  const Range me = split_range(total, p.size, p.rank);
  const size_t rows = size_t(me.size());
  size_t b0, b1;
  chunk_of(rows * size_t(cols), &b0, &b1);
  for (int q = 0; q < p.size; ++q) {
    float* slot = p.recv[q] + half + size_t(p.rank) * p.cap;
    for (size_t e = b0 + threadIdx.x; e < b1; e += blockDim.x) slot[e] = src[(e / rows) * src_ld + e % rows];
  }
  exchange_flags(p, epoch);
  for (int q = 0; q < p.size; ++q) {
    const Range r = split_range(total, p.size, q);
    const size_t rq = size_t(r.size());
    size_t c0, c1;
    chunk_of(rq * size_t(cols), &c0, &c1);
    const float* slot = p.recv[p.rank] + half + size_t(q) * p.cap;
    for (size_t e = c0 + threadIdx.x; e < c1; e += blockDim.x)
      dst[(e / rq) * dst_ld + size_t(r.begin) + e % rq] = __ldcg(slot + e);
  }
  if (threadIdx.x == 0) p.epochs[blockIdx.x] = epoch;
}

// Every call runs all kMaxBlocks blocks, whatever its size: each block's
// call counter then advances with every call, so a region of a buffer is
// always written and read under the same half by every block and rank.
constexpr int kBlocks = kMaxBlocks;

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw Error(std::string("nvlink ") + what + ": " + cudaGetErrorString(e));
}

}  // namespace

void nvlink_load_kernels() {
  cudaFuncAttributes a;
  if (cudaFuncGetAttributes(&a, all_reduce_kernel) != cudaSuccess ||
      cudaFuncGetAttributes(&a, all_gather_kernel) != cudaSuccess)
    check_launch("load");
}

void nvlink_all_reduce(const NvlinkPeers& p, const float* src, float* dst, size_t n, cudaStream_t s) {
  if (n > p.cap) throw Error("nvlink all_reduce: message larger than the buffers");
  all_reduce_kernel<<<kBlocks, kThreads, 0, s>>>(p, src, dst, n);
  check_launch("all_reduce");
}

void nvlink_all_gather(const NvlinkPeers& p, const float* src, size_t src_ld, float* dst, size_t dst_ld,
                       int64_t total, int64_t cols, cudaStream_t s) {
  const size_t most = size_t(split_range(total, p.size, 0).size()) * size_t(cols);
  if (most > p.cap) throw Error("nvlink all_gather: message larger than the buffers");
  all_gather_kernel<<<kBlocks, kThreads, 0, s>>>(p, src, src_ld, dst, dst_ld, total, cols);
  check_launch("all_gather");
}

}  // namespace weir::comm_cuda
