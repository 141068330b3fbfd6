// All-reduce latency between the GPUs of this host, inside CUDA graphs (as
// decode runs them): for 256 B .. 16 MiB, the NVLink one-shot kernel and
// NCCL, each rank a thread recording 50 calls in a graph and replaying it
// with the others. Prints microseconds a call (the slowest rank's).
//   build/microbench/weir_microbench_cuda --gtest_filter='AllReduceBench.*'
// WEIR_BENCH_GPUS=4 for four GPUs (default 2).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "backend/registry.h"
#include "comm/gpu_comm.h"

namespace weir {
namespace {

constexpr int kCalls = 50;

// Microseconds a call for `bytes` on every rank (the slowest), or -1.
double time_calls(std::vector<std::unique_ptr<Collective>>& comms, const std::vector<int>& devices, size_t bytes) {
  const int n = int(devices.size());
  std::vector<double> us(static_cast<size_t>(n), -1.0);
  std::atomic<int> ready{0};
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      cudaSetDevice(devices[size_t(r)]);
      cudaStream_t s;
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      const size_t count = bytes / sizeof(float);
      float *a = nullptr, *b = nullptr;
      cudaMalloc(&a, bytes);
      cudaMalloc(&b, bytes);
      cudaMemset(a, 0, bytes);
      comms[size_t(r)]->prepare(count);
      try {  // once outside a recording (every rank at once)
        comms[size_t(r)]->all_reduce_sum(a, b, count, s);
        cudaStreamSynchronize(s);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      cudaGraph_t g;
      cudaGraphExec_t exec = nullptr;
      try {
        cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
        for (int k = 0; k < kCalls; ++k) comms[size_t(r)]->all_reduce_sum(k % 2 ? b : a, k % 2 ? a : b, count, s);
        cudaStreamEndCapture(s, &g);
        cudaGraphInstantiate(&exec, g, 0);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      // A warm-up replay, then the timed one, all ranks together.
      for (int rep = 0; rep < 2; ++rep) {
        ++ready;
        while (ready.load() < n * (rep + 1)) std::this_thread::yield();
        cudaEventRecord(e0, s);
        if (exec) cudaGraphLaunch(exec, s);
        cudaEventRecord(e1, s);
        cudaStreamSynchronize(s);
      }
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      if (exec) us[size_t(r)] = 1000.0 * ms / kCalls;
      if (exec) cudaGraphExecDestroy(exec);
      cudaFree(a);
      cudaFree(b);
      cudaStreamDestroy(s);
    });
  for (auto& t : ts) t.join();
  double worst = 0;
  for (double u : us) {
    if (u < 0) return -1;
    worst = std::max(worst, u);
  }
  return worst;
}

TEST(AllReduceBench, LatencyTable) {
  const char* env = std::getenv("WEIR_BENCH_GPUS");
  const int n = env ? std::atoi(env) : 2;
  if (int(cuda_devices().size()) < n) GTEST_SKIP() << "needs " << n << " GPUs";
  std::vector<int> devices;
  for (int r = 0; r < n; ++r) devices.push_back(r);
  GpuCommOptions nv;
  nv.nccl = false;
  nv.nvlink_max_bytes = size_t(16) << 20;
  GpuCommOptions nc;
  nc.nvlink_max_bytes = 0;
  auto nvlink = make_gpu_comms(devices, nv);
  auto nccl = make_gpu_comms(devices, nc);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows as they come
  std::printf("all-reduce on %d GPUs inside a CUDA graph, us a call (%d calls, slowest rank)\n", n, kCalls);
  std::printf("| bytes | NVLink one-shot | NCCL |\n|---:|---:|---:|\n");
  for (size_t bytes = 256; bytes <= (size_t(16) << 20); bytes *= 4) {
    const double a = time_calls(nvlink, devices, bytes), b = time_calls(nccl, devices, bytes);
    std::printf("| %zu | %.2f | %.2f |\n", bytes, a, b);
  }
  std::printf("| 16384 | %.2f | %.2f |\n", time_calls(nvlink, devices, 16384), time_calls(nccl, devices, 16384));
}

}  // namespace
}  // namespace weir
