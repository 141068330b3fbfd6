// Can weight reads continue across product boundaries? (docs/perf.md, issue
// 28.) A chain of "products" shaped like a decode token's layers: each link
// reads the whole x the link before wrote, streams its own weights (no
// arithmetic but a checksum) and writes its share of the next x. Three ways
// to run the same chain, timed per layer (median of replays of one graph):
//   pdl      one launch a link, programmatic dependent launch (the engine's
//            way today); each block loads its first A vectors a thread
//            before griddepcontrol.wait.
//   persist  one launch for all links: a grid of the blocks the SMs hold at
//            once loops over the links, waiting on a counter in global memory
//            that the blocks of the link before raise (release/acquire at gpu
//            scope); the first A vectors a thread of the next link are loaded
//            before the wait, so a block that finished early streams on.
//   prefetch the pdl chain plus one small kernel beside it (a parallel branch
//            of the graph) that walks the weights in order and asks the L2
//            for them (cp.async.bulk.prefetch.L2) up to P MB ahead of the link
//            that has started (each link's first block publishes its index).
// Every link checks every element of x it reads against this replay's value.
//   nvcc -O3 -arch=sm_90 -o /tmp/sa scripts/gpu-stream-across.cu && /tmp/sa
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

constexpr int kThreads = 512;
constexpr int kMaxLinks = 256;

struct Chain {
  float* xs;                   // (links + 1) vectors of n floats
  int n;
  const uint4* w;              // all weights, link after link
  size_t off[kMaxLinks + 1];   // link k's weights: [off[k], off[k + 1]) in uint4
  int links;
  unsigned* counters;          // persist: blocks done with link k - 1
  unsigned* progress;          // prefetch: links started
  const unsigned* epoch;
  unsigned* err;
  unsigned* sink;
};

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned ld_relaxed(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Link k's work for block b of `blocks`; `first` holds its first A vectors a
// thread, loaded by the caller before it waited.
template <int A>
__device__ void link_body(const Chain& C, int k, unsigned b, unsigned blocks, const uint4 (&first)[A]) {
  const size_t per = (C.off[k + 1] - C.off[k]) / blocks;
  const uint4* w = C.w + C.off[k] + size_t(b) * per;
  const float* x = C.xs + size_t(k) * C.n;
  float* y = C.xs + size_t(k + 1) * C.n;
  const float want = float(*C.epoch * 256u + unsigned(k));
  unsigned bad = 0;
  for (int i = threadIdx.x; i < C.n; i += kThreads) bad += x[i] != want;
  unsigned acc = 0;
#pragma unroll
  for (int a = 0; a < A; ++a) acc ^= first[a].x ^ first[a].w;
  for (size_t i = threadIdx.x + size_t(A) * kThreads; i < per; i += 4 * kThreads) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const size_t j = i + size_t(u) * kThreads;
      v[u] = j < per ? w[j] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x + v[u].y + v[u].z + v[u].w;
  }
  if (bad) atomicAdd(C.err, bad);
  if (threadIdx.x < 32)
    for (int i = int(b) * 32 + threadIdx.x; i < C.n; i += int(blocks) * 32) y[i] = want + 1.0f;
  if (acc == 0x12345678u) C.sink[0] = acc;
}

template <int A>
__device__ void load_first(const Chain& C, int k, unsigned b, unsigned blocks, uint4 (&first)[A]) {
  const size_t per = (C.off[k + 1] - C.off[k]) / blocks;
  const uint4* w = C.w + C.off[k] + size_t(b) * per;
#pragma unroll
  for (int a = 0; a < A; ++a) {
    const size_t j = threadIdx.x + size_t(a) * kThreads;
    first[a] = j < per ? w[j] : make_uint4(0, 0, 0, 0);
  }
}

template <int A>
__global__ void __launch_bounds__(kThreads) pdl_link(const __grid_constant__ Chain C, int k) {
  asm volatile("griddepcontrol.launch_dependents;");
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicMax(C.progress, unsigned(k + 1));
  uint4 first[A];
  load_first<A>(C, k, blockIdx.x, gridDim.x, first);
  asm volatile("griddepcontrol.wait;" ::: "memory");
  link_body<A>(C, k, blockIdx.x, gridDim.x, first);
}

template <int A>
__global__ void __launch_bounds__(kThreads) persist_chain(const __grid_constant__ Chain C) {
  asm volatile("griddepcontrol.launch_dependents;");
  asm volatile("griddepcontrol.wait;" ::: "memory");  // the seed
  for (int k = 0; k < C.links; ++k) {
    uint4 first[A];
    load_first<A>(C, k, blockIdx.x, gridDim.x, first);
    if (threadIdx.x == 0)
      while (ld_acquire(C.counters + k) < gridDim.x) {
      }
    __syncthreads();
    link_body<A>(C, k, blockIdx.x, gridDim.x, first);
    __syncthreads();  // the block's writes of y before its count
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(C.counters + k + 1, 1u);
    }
  }
}

__device__ __forceinline__ size_t umin(size_t a, size_t b) { return a < b ? a : b; }

// One warp: asks the L2 for the weights in order, at most `ahead` bytes past
// the start of the newest link that has started.
__global__ void prefetcher(const __grid_constant__ Chain C, size_t ahead, unsigned epoch_links) {
  const char* base = reinterpret_cast<const char*>(C.w);
  const size_t end = C.off[C.links] * 16;
  size_t next = 0;
  constexpr size_t kStep = 32 << 10;  // bytes a lane asks for at once
  while (next < end) {
    unsigned started = __shfl_sync(~0u, threadIdx.x == 0 ? ld_relaxed(C.progress) : 0u, 0);
    if (started > unsigned(C.links)) started = 0;  // last replay's value (reset by the seed)
    if (started == unsigned(C.links)) break;      // every link has started: nothing left to ask ahead
    const size_t started_at = C.off[started > 0 ? started - 1 : 0] * 16;
    const size_t limit = umin(end, started_at + ahead);
    if (next >= limit) {
      __nanosleep(200);
      continue;
    }
    const size_t chunk = umin(limit - next, 32 * kStep);
    const size_t mine = next + size_t(threadIdx.x) * kStep;
    if (mine < next + chunk) {
      const unsigned bytes = unsigned(umin(kStep, next + chunk - mine)) & ~15u;
      if (bytes)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base + mine), "r"(bytes) : "memory");
    }
    next += chunk;
    __syncwarp();
  }
  (void)epoch_links;
}

__global__ void seed_kernel(unsigned* epoch, float* x0, int n, unsigned* counters, int links, unsigned blocks,
                            unsigned* progress) {
  const unsigned e = *epoch + 1;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) x0[i] = float(e * 256u);
  for (int i = threadIdx.x; i <= links; i += blockDim.x) counters[i] = i == 0 ? blocks : 0;
  if (threadIdx.x == 0) *progress = 0;
  __syncthreads();
  if (threadIdx.x == 0) *epoch = e;
}

template <class K, class... Args>
void launch(K kernel, unsigned grid, cudaStream_t s, bool pdl, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = kThreads;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  if (pdl) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  CK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

enum Mode { kPdl, kPersist, kPrefetch };

// µs a replay (median of 22) and the errors seen.
template <int A>
double run(Mode mode, const std::vector<double>& mb, int layers, unsigned blocks, size_t ahead, unsigned* errors) {
  Chain C{};
  C.n = 4096;
  C.links = int(mb.size()) * layers;
  if (C.links > kMaxLinks) std::exit(2);
  C.off[0] = 0;
  for (int k = 0; k < C.links; ++k) {
    size_t v = size_t(mb[size_t(k) % mb.size()] * (1 << 20)) / 16 / blocks * blocks;
    C.off[k + 1] = C.off[k] + v;
  }
  CK(cudaMalloc(&C.xs, size_t(C.links + 1) * C.n * 4));
  uint4* w = nullptr;
  CK(cudaMalloc(&w, C.off[C.links] * 16 + 16));
  CK(cudaMemset(w, 1, C.off[C.links] * 16 + 16));
  C.w = w;
  unsigned* epoch = nullptr;
  CK(cudaMalloc(&C.counters, size_t(C.links + 1) * 4));
  CK(cudaMalloc(&C.progress, 4));
  CK(cudaMalloc(&epoch, 4));
  CK(cudaMalloc(&C.err, 4));
  CK(cudaMalloc(&C.sink, 4));
  CK(cudaMemset(epoch, 0, 4));
  CK(cudaMemset(C.err, 0, 4));
  C.epoch = epoch;
  CK(cudaDeviceSynchronize());
  cudaStream_t s, s2;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  seed_kernel<<<1, 512, 0, s>>>(epoch, C.xs, C.n, C.counters, C.links, blocks, C.progress);
  if (mode == kPrefetch) {
    CK(cudaEventRecord(fork, s));
    CK(cudaStreamWaitEvent(s2, fork, 0));
    prefetcher<<<1, 32, 0, s2>>>(C, ahead, 0u);
    CK(cudaEventRecord(join, s2));
  }
  if (mode == kPersist) {
    launch(persist_chain<A>, blocks, s, false, C);  // all its blocks resident: after the seed
  } else {
    for (int k = 0; k < C.links; ++k) launch(pdl_link<A>, blocks, s, true, C, k);
  }
  if (mode == kPrefetch) CK(cudaStreamWaitEvent(s, join, 0));
  CK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<double> t;
  for (int r = 0; r < 25; ++r) {
    CK(cudaEventRecord(a, s));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (r >= 3) t.push_back(double(ms) * 1e3);
  }
  CK(cudaMemcpy(errors, C.err, 4, cudaMemcpyDeviceToHost));
  std::sort(t.begin(), t.end());
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  CK(cudaStreamDestroy(s));
  CK(cudaStreamDestroy(s2));
  CK(cudaFree(C.xs));
  CK(cudaFree(w));
  CK(cudaFree(C.counters));
  CK(cudaFree(C.progress));
  CK(cudaFree(epoch));
  CK(cudaFree(C.err));
  CK(cudaFree(C.sink));
  return t[t.size() / 2];
}

int main() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  cudaDeviceProp p{};
  CK(cudaGetDeviceProperties(&p, 0));
  const unsigned sms = unsigned(p.multiProcessorCount);
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persist_chain<4>, kThreads, 0));
  std::printf("%s, %d SMs, %d persistent blocks an SM of %d threads; us a layer (median of 22 replays)\n", p.name,
              p.multiProcessorCount, per_sm, kThreads);
  struct Shape {
    const char* name;
    std::vector<double> mb;
    int layers;
  };
  // 8B Q4_K_M: q/k(+v) 11.8 MB, o 9.4, gate/up 66, down 33 (q4_K) / 48 (q6_K);
  // attention (no weights) as a link of 0 MB. 1B Q4_0: q/k/v 3.5, o 2.4,
  // gate/up 19, down 9.4.
  const std::vector<Shape> shapes = {
      {"8B-like", {11.8, 0, 9.4, 66, 40}, 32},
      {"1B-like", {3.5, 0, 2.4, 19, 9.4}, 16},
  };
  for (const auto& sh : shapes) {
    double bytes = 0;
    for (double m : sh.mb) bytes += m * (1 << 20);
    std::printf("\n%s: %.1f MB a layer, %d layers\n", sh.name, bytes / (1 << 20), sh.layers);
    std::printf("mode                      A   blocks   us/layer   TB/s   errors\n");
    auto row = [&](const char* name, Mode m, int A, unsigned blocks, size_t ahead) {
      unsigned e = 0;
      const double t = (A == 1 ? run<1>(m, sh.mb, sh.layers, blocks, ahead, &e)
                               : run<4>(m, sh.mb, sh.layers, blocks, ahead, &e)) /
                       sh.layers;
      std::printf("%-24s %2d  %6u  %9.2f  %5.2f   %u\n", name, A, blocks, t, bytes / (t * 1e-6) / 1e12, e);
    };
    for (int A : {1, 4}) {
      row("pdl", kPdl, A, sms, 0);
      row("pdl", kPdl, A, 2 * sms, 0);
      row("persist", kPersist, A, sms, 0);
      row("persist", kPersist, A, unsigned(per_sm) * sms, 0);
    }
    for (size_t ahead : {size_t(8), size_t(16), size_t(32)}) {
      char name[64];
      std::snprintf(name, sizeof name, "pdl+prefetch %zu MB", ahead);
      row(name, kPrefetch, 1, 2 * sms, ahead << 20);
    }
  }
  return 0;
}
