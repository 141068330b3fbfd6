#include "comm/cuda/nvlink_kernels.h"

#include "core/collective.h"
#include "core/error.h"

namespace weir::comm_cuda {
namespace {

constexpr int kThreads = 512;

// One 16-byte store / load, never cached in L1 and never split: the two
// 8-byte halves (a float and the call's number) each arrive whole.
__device__ __forceinline__ void store_word(uint4* p, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}
__device__ __forceinline__ uint4 load_word(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

// The call's number for this block (the same on every rank: every rank
// makes the same calls in the same order, and every call runs every block).
__device__ __forceinline__ uint32_t next_epoch(const NvlinkPeers& p, uint32_t* shared) {
  if (threadIdx.x == 0) {
    const uint32_t e = p.epochs[blockIdx.x] + 1;
    *shared = e == 0 ? 2 : e;  // never 0, what unwritten words hold (2 keeps the halves alternating)
  }
  __syncthreads();
  return *shared;
}
__device__ __forceinline__ void end_call(const NvlinkPeers& p, uint32_t epoch) {
  if (threadIdx.x == 0) p.epochs[blockIdx.x] = epoch;
}

// Waits for word w of this call; traps when it does not come in time.
__device__ __forceinline__ uint4 wait_word(const uint4* w, uint32_t epoch, long long timeout) {
  uint4 v = load_word(w);
  if (v.y == epoch && v.w == epoch) return v;
  const long long start = clock64();
  for (;;) {
    v = load_word(w);
    if (v.y == epoch && v.w == epoch) return v;
    if (timeout > 0 && clock64() - start > timeout) __trap();  // a rank never came
  }
}

__device__ __forceinline__ uint4 word_of(float a, float b, uint32_t epoch) {
  return make_uint4(__float_as_uint(a), epoch, __float_as_uint(b), epoch);
}

// Word range [begin, end) of this block in n words.
__device__ __forceinline__ void chunk_of(size_t n, size_t* begin, size_t* end) {
  const size_t per = (n + gridDim.x - 1) / gridDim.x;
  *begin = min(n, size_t(blockIdx.x) * per);
  *end = min(n, *begin + per);
}

__device__ __forceinline__ uint4* slot(const NvlinkPeers& p, int owner, uint32_t epoch, int from) {
  const size_t words = p.cap / 2;
  return p.recv[owner] + (size_t(epoch & 1u) * size_t(p.size) + size_t(from)) * words;
}

__global__ void __launch_bounds__(kThreads) all_reduce_kernel(NvlinkPeers p, const float* src,
                                                              float* dst, size_t n) {
  __shared__ uint32_t epoch_s;
  const uint32_t epoch = next_epoch(p, &epoch_s);
  const size_t words = (n + 1) / 2;
  size_t b0, b1;
  chunk_of(words, &b0, &b1);
  for (size_t i = b0 + threadIdx.x; i < b1; i += blockDim.x) {
    const float a = src[2 * i], b = 2 * i + 1 < n ? src[2 * i + 1] : 0.0f;
    const uint4 w = word_of(a, b, epoch);
    for (int k = 0; k < p.size; ++k) {
      const int q = (p.rank + k) % p.size;  // spread the first stores over the links
      store_word(slot(p, q, epoch, p.rank) + i, w);
    }
  }
  for (size_t i = b0 + threadIdx.x; i < b1; i += blockDim.x) {
    float a = 0, b = 0;
    for (int q = 0; q < p.size; ++q) {
      const uint4 v = wait_word(slot(p, p.rank, epoch, q) + i, epoch, p.timeout_cycles);
      a += __uint_as_float(v.x);
      b += __uint_as_float(v.z);
    }
    dst[2 * i] = a;
    if (2 * i + 1 < n) dst[2 * i + 1] = b;
  }
  end_call(p, epoch);
}

__global__ void __launch_bounds__(kThreads) all_gather_kernel(NvlinkPeers p, const float* __restrict__ src,
                                                              size_t src_ld, float* __restrict__ dst, size_t dst_ld,
                                                              int64_t total, int64_t cols) {
  __shared__ uint32_t epoch_s;
  const uint32_t epoch = next_epoch(p, &epoch_s);
  // This rank's part, flattened column by column: element e is row e % rows
  // of column e / rows.
  const Range me = split_range(total, p.size, p.rank);
  const size_t rows = size_t(me.size()), n = rows * size_t(cols);
  size_t b0, b1;
  chunk_of((n + 1) / 2, &b0, &b1);
  for (size_t i = b0 + threadIdx.x; i < b1; i += blockDim.x) {
    const size_t e = 2 * i;
    const float a = src[(e / rows) * src_ld + e % rows];
    const float b = e + 1 < n ? src[((e + 1) / rows) * src_ld + (e + 1) % rows] : 0.0f;
    const uint4 w = word_of(a, b, epoch);
    for (int k = 0; k < p.size; ++k) store_word(slot(p, (p.rank + k) % p.size, epoch, p.rank) + i, w);
  }
  for (int q = 0; q < p.size; ++q) {
    const Range r = split_range(total, p.size, q);
    const size_t rq = size_t(r.size()), nq = rq * size_t(cols);
    size_t c0, c1;
    chunk_of((nq + 1) / 2, &c0, &c1);
    const uint4* from = slot(p, p.rank, epoch, q);
    for (size_t i = c0 + threadIdx.x; i < c1; i += blockDim.x) {
      const uint4 v = wait_word(from + i, epoch, p.timeout_cycles);
      const size_t e = 2 * i;
      dst[(e / rq) * dst_ld + size_t(r.begin) + e % rq] = __uint_as_float(v.x);
      if (e + 1 < nq) dst[((e + 1) / rq) * dst_ld + size_t(r.begin) + (e + 1) % rq] = __uint_as_float(v.z);
    }
  }
  end_call(p, epoch);
}

// Every call runs all kMaxBlocks blocks, whatever its size: each block's
// call counter then advances with every call, so all blocks of all ranks
// agree on every call's number and half.
constexpr int kBlocks = kMaxBlocks;

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw Error(std::string("nvlink ") + what + ": " + cudaGetErrorString(e));
}

}  // namespace

size_t nvlink_buffer_bytes(size_t cap, int n) { return 2 * size_t(n) * (cap / 2) * sizeof(uint4); }

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
