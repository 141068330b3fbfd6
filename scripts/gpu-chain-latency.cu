// What a dependent launch costs (docs/perf.md): a chain of L kernels in one
// CUDA graph, each reading the whole vector the one before wrote (as every
// decode product reads all of its x) and writing its share of the next,
// optionally streaming its own "weights" (loaded first before it waits, as
// the decode products do). Three ways to wait for the kernel ahead:
//   plain  graph edges, no programmatic dependent launch
//   pdl    programmatic dependent launch, griddepcontrol.wait
//   flag   programmatic dependent launch, but each block spins on a counter
//          the blocks of the kernel ahead raise when they are done (acquire /
//          release at gpu scope), not on the grid's completion
// Every link checks the sum of the vector it reads against the value this
// replay must see (a stale line from the last replay would show).
//   nvcc -O3 -arch=sm_90 -o /tmp/cl scripts/gpu-chain-latency.cu && /tmp/cl
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                         \
  do {                                                                \
    cudaError_t e_ = (x);                                             \
    if (e_ != cudaSuccess) {                                          \
      std::printf("%s: %s\n", #x, cudaGetErrorString(e_));            \
      std::exit(1);                                                   \
    }                                                                 \
  } while (0)

enum Mode { kPlain = 0, kPdl = 1, kFlag = 2 };

struct Link {
  const float* x;  // n floats, all equal to base + k
  float* y;        // n floats: this link writes base + k + 1, 32 a block in turn
  int n;
  const uint4* w;  // this link's weights: vpb 16-byte vectors a block
  int vpb;
  const unsigned* prev;  // flag: blocks of the kernel ahead done
  unsigned* self;        // flag: this kernel's
  unsigned target;       // flag: the count to wait for
  const unsigned* epoch;
  int k;
  unsigned* err;
  unsigned* sink;
};

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

template <int MODE>
__global__ void __launch_bounds__(512) link_kernel(Link L) {
  if (MODE != kPlain) asm volatile("griddepcontrol.launch_dependents;");
  const uint4* w = L.w + size_t(blockIdx.x) * L.vpb;
  uint4 first = make_uint4(0, 0, 0, 0);
  if (int(threadIdx.x) < L.vpb) first = w[threadIdx.x];  // fixed data: before the wait
  if (MODE == kPdl) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (MODE == kFlag) {
    if (threadIdx.x == 0)
      while (ld_acquire(L.prev) < L.target) {
      }
    __syncthreads();
  }
  // The whole of x, each element checked.
  const float want = float(*L.epoch * 256u + unsigned(L.k));
  unsigned bad = 0;
  for (int i = threadIdx.x; i < L.n; i += blockDim.x) bad += L.x[i] != want;
  // The rest of the weights, 4 loads in flight a thread.
  unsigned acc = first.x ^ first.w;
  for (int i = threadIdx.x + blockDim.x; i < L.vpb; i += 4 * blockDim.x) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int j = i + u * int(blockDim.x);
      v[u] = j < L.vpb ? w[j] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x + v[u].y + v[u].z + v[u].w;
  }
  if (bad) atomicAdd(L.err, bad);
  if (threadIdx.x < 32)
    for (int i = blockIdx.x * 32 + threadIdx.x; i < L.n; i += gridDim.x * 32)
      L.y[i] = float(*L.epoch * 256u + unsigned(L.k) + 1u);
  if (acc == 0x12345678u) L.sink[0] = acc;
  if (MODE == kFlag) {
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(L.self, 1u);
    }
  }
}

// The start of a replay: a new epoch, x0 for it, every counter zero but the
// first link's (as if a kernel of `blocks` blocks had run before it).
__global__ void seed_kernel(unsigned* epoch, float* x0, int n, unsigned* counters, int links, unsigned blocks) {
  const unsigned e = *epoch + 1;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) x0[i] = float(e * 256u);
  for (int i = threadIdx.x; i <= links; i += blockDim.x) counters[i] = i == 0 ? blocks : 0;
  __syncthreads();
  if (threadIdx.x == 0) *epoch = e;
}

template <int MODE>
void launch_link(const Link& L, unsigned blocks, cudaStream_t s, size_t smem) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = blocks;
  cfg.blockDim = 512;
  cfg.stream = s;
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr[1];
  if (MODE != kPlain) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  CK(cudaLaunchKernelEx(&cfg, link_kernel<MODE>, L));
}

// µs a link (median of replays) and the errors seen.
// smem: dynamic shared memory a block (unused), to cap the blocks an SM holds.
template <int MODE>
double run(int links, unsigned blocks, size_t weight_bytes, unsigned* errors, size_t smem = 0) {
  const int n = 4096;  // x: 16 KB, read whole by every block (a 4096-wide 8-bit x is 4.6 KB)
  const int vpb = int(weight_bytes / 16 / blocks);
  std::vector<float*> bufs(size_t(links) + 1);
  for (auto& b : bufs) CK(cudaMalloc(&b, size_t(n) * 4));
  uint4* w = nullptr;
  const size_t wbytes = size_t(links) * size_t(vpb) * blocks * 16;
  CK(cudaMalloc(&w, std::max<size_t>(wbytes, 16)));
  CK(cudaMemset(w, 1, std::max<size_t>(wbytes, 16)));
  unsigned *counters = nullptr, *epoch = nullptr, *err = nullptr, *sink = nullptr;
  CK(cudaMalloc(&counters, size_t(links + 1) * 4));
  CK(cudaMalloc(&epoch, 4));
  CK(cudaMalloc(&err, 4));
  CK(cudaMalloc(&sink, 4));
  CK(cudaMemset(epoch, 0, 4));
  CK(cudaMemset(err, 0, 4));
  CK(cudaDeviceSynchronize());  // the memsets (legacy stream) done before the graph runs on its own stream
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  seed_kernel<<<1, 512, 0, s>>>(epoch, bufs[0], n, counters, links, blocks);
  for (int k = 0; k < links; ++k) {
    Link L{bufs[size_t(k)], bufs[size_t(k) + 1], n, w + size_t(k) * size_t(vpb) * blocks, vpb, counters + k,
           counters + k + 1, blocks, epoch, k, err, sink};
    launch_link<MODE>(L, blocks, s, smem);
  }
  CK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<double> t;
  for (int r = 0; r < 25; ++r) {  // epochs stay below 2^24 / 256 / n: exact floats
    CK(cudaEventRecord(a, s));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (r >= 3) t.push_back(double(ms) * 1e3 / links);
  }
  CK(cudaMemcpy(errors, err, 4, cudaMemcpyDeviceToHost));
  std::sort(t.begin(), t.end());
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  CK(cudaStreamDestroy(s));
  for (auto& bf : bufs) CK(cudaFree(bf));
  CK(cudaFree(w));
  CK(cudaFree(counters));
  CK(cudaFree(epoch));
  CK(cudaFree(err));
  CK(cudaFree(sink));
  return t[t.size() / 2];
}

int main(int argc, char** argv) {
  const int links = argc > 1 ? std::atoi(argv[1]) : 160;
  cudaDeviceProp p{};
  CK(cudaGetDeviceProperties(&p, 0));
  std::printf("%s, %d SMs; %d links a graph, 512-thread blocks; us a link (median of 22 replays)\n", p.name,
              p.multiProcessorCount, links);
  std::printf("blocks  weights/link  plain     pdl    flag   (errors: plain/pdl/flag)\n");
  const unsigned sms = unsigned(p.multiProcessorCount);
  for (unsigned blocks : {32u, sms / 2, sms})
    for (size_t mb : {size_t(0), size_t(2), size_t(9), size_t(32)}) {
      unsigned e0 = 0, e1 = 0, e2 = 0;
      const double t0 = run<kPlain>(links, blocks, mb << 20, &e0);
      const double t1 = run<kPdl>(links, blocks, mb << 20, &e1);
      const double t2 = run<kFlag>(links, blocks, mb << 20, &e2);
      std::printf("%6u  %9zu MB  %6.2f  %6.2f  %6.2f   (%u/%u/%u)\n", blocks, mb, t0, t1, t2, e0, e1, e2);
    }
  // The same bytes a link in one wave of blocks or in more: two blocks an
  // SM (shared memory caps them), one or several blocks' worth of rows each.
  const size_t smem = 100 << 10;
  CK(cudaFuncSetAttribute(link_kernel<kPdl>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  std::printf("\npdl, 2 blocks an SM: us a link and TB/s by grid (waves of %u blocks)\n", 2 * sms);
  for (size_t mb : {size_t(9), size_t(32), size_t(64)})
    for (unsigned blocks : {2 * sms, 448u, 4 * sms, 16 * sms}) {
      unsigned e = 0;
      const double t = run<kPdl>(links / 4, blocks, mb << 20, &e, smem);
      std::printf("%6zu MB  %5u blocks (%.2f waves)  %7.2f us  %5.2f TB/s  (errors %u)\n", mb, blocks,
                  double(blocks) / (2 * sms), t, double(mb << 20) / (t * 1e-6) / 1e12, e);
    }
  return 0;
}
