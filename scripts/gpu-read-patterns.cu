// Device-memory read bandwidth by access pattern, for the decode products'
// design (docs/perf.md): a 64 MB matrix of rows read once, each warp taking
// R rows and reading `run` contiguous bytes of each (16 bytes a lane, all of
// a step's loads issued before any is used), the rows' steps interleaved as
// the decode kernels interleave them. Does a longer run a row (fewer rows
// open at once) read faster at the same bytes in flight, and how much of a
// launch's time is its fill and drain (64 MB vs 1 GB)?
//   nvcc -O3 -arch=sm_90 -o /tmp/rp scripts/gpu-read-patterns.cu && /tmp/rp [MB]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      std::printf("%s: %s\n", #x, cudaGetErrorString(e_));                     \
      return 1;                                                                \
    }                                                                          \
  } while (0)

// R rows a warp, U 16-byte loads a lane a row a step (run = 512 U bytes).
template <int R, int U>
__global__ void __launch_bounds__(256) read_rows(const uint4* __restrict__ m, size_t row_vecs, size_t rows,
                                                 unsigned* out) {
  const size_t warp = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  const size_t row0 = warp * R;
  if (row0 >= rows) return;
  unsigned acc = 0;
  for (size_t v0 = 0; v0 < row_vecs; v0 += 32 * U) {
    uint4 x[R][U];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const size_t v = v0 + size_t(u) * 32 + lane;
        x[r][u] = v < row_vecs ? m[(row0 + r) * row_vecs + v] : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int u = 0; u < U; ++u) acc ^= x[r][u].x + x[r][u].y + x[r][u].z + x[r][u].w;
  }
  if (acc == 0x12345678u) out[0] = acc;  // keeps the loads
}

template <int R, int U>
float run(const uint4* m, size_t row_bytes, size_t rows, unsigned* out, int warps_per_block) {
  const size_t warps = (rows + R - 1) / R;
  const unsigned threads = unsigned(32 * warps_per_block);
  const unsigned blocks = unsigned((warps * 32 + threads - 1) / threads);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> t;
  for (int i = 0; i < 12; ++i) {
    cudaEventRecord(a);
    read_rows<R, U><<<blocks, threads>>>(m, row_bytes / 16, rows, out);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (i >= 2) t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return float(double(row_bytes) * double(rows) / (double(t[t.size() / 2]) * 1e-3) / 1e9);
}

int main(int argc, char** argv) {
  // MB read a kernel (default 64, about llama 8B's gate and up together);
  // a large size shows the steady rate, the default also its fill and drain.
  const size_t total = size_t(argc > 1 ? std::atoi(argv[1]) : 64) << 20;
  uint4* m = nullptr;
  unsigned* out = nullptr;
  CK(cudaMalloc(&m, total + 4096));
  CK(cudaMalloc(&out, 4));
  CK(cudaMemset(m, 1, total));
  std::printf("row bytes  R rows/warp  run B/row/step  in flight/warp  GB/s (256-thread blocks)\n");
  for (size_t row_bytes : {size_t(2304), size_t(8064)}) {
    const size_t rows = total / row_bytes;
    std::printf("%9zu  %11d  %14d  %14d  %8.0f\n", row_bytes, 4, 512, 2048, run<4, 1>(m, row_bytes, rows, out, 8));
    std::printf("%9zu  %11d  %14d  %14d  %8.0f\n", row_bytes, 2, 1024, 2048, run<2, 2>(m, row_bytes, rows, out, 8));
    std::printf("%9zu  %11d  %14d  %14d  %8.0f\n", row_bytes, 1, 2048, 2048, run<1, 4>(m, row_bytes, rows, out, 8));
    std::printf("%9zu  %11d  %14d  %14d  %8.0f\n", row_bytes, 4, 1024, 4096, run<4, 2>(m, row_bytes, rows, out, 8));
    std::printf("%9zu  %11d  %14d  %14d  %8.0f\n", row_bytes, 2, 2048, 4096, run<2, 4>(m, row_bytes, rows, out, 8));
    std::printf("%9zu  %11d  %14d  %14d  %8.0f\n", row_bytes, 1, 4096, 4096, run<1, 8>(m, row_bytes, rows, out, 8));
  }
  CK(cudaGetLastError());
  return 0;
}
