// What reading a layer's K and V costs on this GPU, apart from attention:
// the 8B's 16.8 MB at depth 4,096 read from DRAM, from L2, bulk-prefetched
// into L2 alone, on a second stream while 14 MB of "weights" are read, and
// against a kernel that computes without reading memory. Each case is 50
// iterations captured in a CUDA graph (no host launch cost), replayed 10
// times; the time is per iteration. docs/perf.md (2026-11-27, fourteenth
// pass) has the H100's and H200's figures.
//
//   nvcc -arch=sm_90 -O3 -o /tmp/kv-read-probe scripts/kv-read-probe.cu && /tmp/kv-read-probe
#include <cstdio>
#include <cuda_runtime.h>
#include <cstdint>
constexpr size_t BYTES = size_t(4096) * 2048 * 2;  // K and V together
__global__ void rd(const char* p, float* out, size_t bytes = BYTES) {
  // 264 blocks x 128 threads, 16-byte loads, 8 in flight a thread
  uint4 acc = make_uint4(0, 0, 0, 0);
  const size_t n = bytes / 16, stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += 8 * stride) {
    uint4 x[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) x[k] = i + k * stride < n ? __ldcg(reinterpret_cast<const uint4*>(p) + i + k * stride) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int k = 0; k < 8; ++k) acc.x ^= x[k].x, acc.y ^= x[k].y, acc.z ^= x[k].z, acc.w ^= x[k].w;
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x12345678u) out[0] = 1.f;
}
__global__ void pf(const char* p, unsigned chunk) {
  for (size_t o = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * chunk; o < BYTES; o += size_t(gridDim.x) * blockDim.x * chunk)
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + o), "r"(chunk) : "memory");
}
__global__ void spin(int us) {  // stands in for the product the prefetch would overlap
  const long long t0 = clock64(); while (clock64() - t0 < (long long)us * 1800) {}
}
int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    fprintf(stderr, "kv-read-probe: no CUDA device\n");
    return 1;
  }
  bool failed = false;
  const int NB = 8;  // 134 MB: more than the L2
  char* buf; float* out;
  cudaMalloc(&buf, BYTES * NB); cudaMalloc(&out, 4); cudaMemset(buf, 1, BYTES * NB);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  cudaStream_t s0; cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking);
  auto time = [&](const char* what, auto body) {
    // 50 iterations captured in a graph (no host launch cost), replayed 10 times
    cudaGraph_t g; cudaGraphExec_t ge;
    cudaStreamBeginCapture(s0, cudaStreamCaptureModeGlobal);
    for (int i = 0; i < 50; ++i) body(i);
    if (cudaStreamEndCapture(s0, &g) != cudaSuccess || cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) { printf("%s: capture failed\n", what); cudaGetLastError(); failed = true; return; }
    cudaGraphLaunch(ge, s0); cudaStreamSynchronize(s0);
    cudaEventRecord(a, s0);
    for (int r = 0; r < 10; ++r) cudaGraphLaunch(ge, s0);
    cudaEventRecord(b, s0); cudaEventSynchronize(b);
    float ms; cudaEventElapsedTime(&ms, a, b);
    printf("%-60s %7.2f us\n", what, ms * 1000 / 500);
    cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
  };
  time("read, DRAM (rotating copies)", [&](int i) { rd<<<264, 128, 0, s0>>>(buf + (i % NB) * BYTES, out); });
  time("read, L2 (the same copy)", [&](int i) { rd<<<264, 128, 0, s0>>>(buf, out); });
  time("empty-ish launch (spin 0)", [&](int i) { spin<<<1, 32, 0, s0>>>(0); });
  for (unsigned ch : {8192u, 32768u})
    for (int nb : {16, 64, 132}) {
      char name[96];
      snprintf(name, sizeof name, "prefetch alone, %u B chunks, %d blocks x 32", ch, nb);
      time(name, [&](int i) { pf<<<nb, 32, 0, s0>>>(buf + (i % NB) * BYTES, ch); });
    }
  time("spin 6 us", [&](int i) { spin<<<132, 32, 0, s0>>>(6); });
  time("spin 6 us, then read (DRAM)", [&](int i) { spin<<<132, 32, 0, s0>>>(6); rd<<<264, 128, 0, s0>>>(buf + (i % NB) * BYTES, out); });
  char* w; cudaMalloc(&w, size_t(14) << 20 << 3); cudaMemset(w, 3, size_t(14) << 20 << 3);
  const size_t WB = size_t(14) << 20;
  time("W 14 MB read (the product stand-in)", [&](int i) { rd<<<264, 128, 0, s0>>>(w + (i % 8) * WB, out, WB); });
  time("W, then KV read", [&](int i) { rd<<<264, 128, 0, s0>>>(w + (i % 8) * WB, out, WB); rd<<<264, 128, 0, s0>>>(buf + (i % NB) * BYTES, out); });
  cudaStream_t s3; cudaStreamCreateWithFlags(&s3, cudaStreamNonBlocking);
  cudaEvent_t e3, e4; cudaEventCreateWithFlags(&e3, cudaEventDisableTiming); cudaEventCreateWithFlags(&e4, cudaEventDisableTiming);
  for (int nb : {16, 64}) {
    char name[96]; snprintf(name, sizeof name, "KV prefetch (%d blocks) on a side stream || W, then KV read", nb);
    time(name, [&](int i) {
      cudaEventRecord(e3, s0); cudaStreamWaitEvent(s3, e3);
      pf<<<nb, 32, 0, s3>>>(buf + (i % NB) * BYTES, 8192);
      rd<<<264, 128, 0, s0>>>(w + (i % 8) * WB, out, WB);
      rd<<<264, 128, 0, s0>>>(buf + (i % NB) * BYTES, out);
      cudaEventRecord(e4, s3); cudaStreamWaitEvent(s0, e4);
    });
  }
  time("KV prefetch in-stream, W, then KV read", [&](int i) {
    pf<<<64, 32, 0, s0>>>(buf + (i % NB) * BYTES, 8192);
    rd<<<264, 128, 0, s0>>>(w + (i % 8) * WB, out, WB);
    rd<<<264, 128, 0, s0>>>(buf + (i % NB) * BYTES, out);
  });
  cudaStream_t s2; cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
  cudaEvent_t e1, e2; cudaEventCreateWithFlags(&e1, cudaEventDisableTiming); cudaEventCreateWithFlags(&e2, cudaEventDisableTiming);
  time("prefetch on a side stream || spin 6 us, then read", [&](int i) {
    cudaEventRecord(e1, s0); cudaStreamWaitEvent(s2, e1);
    pf<<<64, 32, 0, s2>>>(buf + (i % NB) * BYTES, 8192);
    spin<<<132, 32, 0, s0>>>(6);
    rd<<<264, 128, 0, s0>>>(buf + (i % NB) * BYTES, out);
    cudaEventRecord(e2, s2); cudaStreamWaitEvent(s0, e2);
  });
  time("prefetch in-stream, spin 6 us, then read", [&](int i) {
    pf<<<64, 32, 0, s0>>>(buf + (i % NB) * BYTES, 8192);
    spin<<<132, 32, 0, s0>>>(6);
    rd<<<264, 128, 0, s0>>>(buf + (i % NB) * BYTES, out);
  });
  return failed ? 1 : 0;
}
