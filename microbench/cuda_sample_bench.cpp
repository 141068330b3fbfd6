// Micro-benchmark of the CUDA sample op. Printed, not asserted; skips
// without a GPU. Run: build/microbench/weir_microbench_cuda
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "cuda/sample_test_util.h"

namespace weir::cuda {
namespace {

using namespace test;  // NOLINT: sample_test_util.h's helpers

// Graph replays of the sample op at Gemma 3's vocabulary (262144), one row
// and 64, for the sampling settings people use.
TEST(CudaSample, GraphReplay) {
  WEIR_REQUIRE_GPU();
  struct Kind {
    const char* name;
    Params p;
  };
  const Kind kinds[] = {{"greedy", {0, 0, 1, 0, 0.5f}},
                        {"temp 1", {1, 0, 1, 0, 0.5f}},
                        {"temp+min-p", {0.8f, 0, 1, 0.05f, 0.5f}},
                        {"cli (0.8, 40, 0.95, 0.05)", {0.8f, 40, 0.95f, 0.05f, 0.5f}},
                        {"top-p 0.9 alone", {1, 0, 0.9f, 0, 0.5f}}};
  for (int64_t n : {1, 64}) {
    const Logits l = peaked(262144, n, 21);
    for (const Kind& k : kinds) {
      Node node(l, std::vector<Params>(size_t(n), k.p));
      cudaStream_t s;
      ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
      cudaGraph_t g;
      ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "capture");
      op_sample(node.dst, node.ctx(s));
      ok(cudaStreamEndCapture(s, &g), "end capture");
      cudaGraphExec_t ge;
      ok(cudaGraphInstantiate(&ge, g, 0), "instantiate");
      for (int i = 0; i < 3; ++i) ok(cudaGraphLaunch(ge, s), "warm up");
      cudaEvent_t e0, e1;
      ok(cudaEventCreate(&e0), "event");
      ok(cudaEventCreate(&e1), "event");
      const int reps = 50;
      ok(cudaEventRecord(e0, s), "record");
      for (int i = 0; i < reps; ++i) ok(cudaGraphLaunch(ge, s), "graph launch");
      ok(cudaEventRecord(e1, s), "record");
      ok(cudaEventSynchronize(e1), "sync");
      float ms = 0;
      ok(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
      std::printf("[ timing ] sample V 262144 n %2lld %-28s %8.1f us per graph launch\n", (long long)n, k.name,
                  1000.0 * ms / reps);
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
      cudaGraphExecDestroy(ge);
      cudaGraphDestroy(g);
      cudaStreamDestroy(s);
    }
  }
}

}  // namespace
}  // namespace weir::cuda
