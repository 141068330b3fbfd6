// GPU groups of one process (comm/gpu_comm.h), one thread a GPU: the NVLink
// one-shot kernels and NCCL against sums and gathers computed on the host,
// every rank with the same bits, called directly and replayed inside a CUDA
// graph. Skipped with fewer than two GPUs.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "backend/registry.h"
#include "comm/gpu_comm.h"
#include "cuda_test_util.h"

namespace weir {
namespace {

int gpus() { return int(cuda_devices().size()); }

std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Runs body(rank) on a thread per rank, each on its GPU.
void on_ranks(const std::vector<int>& devices, const std::function<void(int)>& body) {
  std::vector<std::thread> ts;
  std::vector<std::string> errors(devices.size());
  for (size_t r = 0; r < devices.size(); ++r)
    ts.emplace_back([&, r] {
      try {
        cudaSetDevice(devices[r]);
        body(int(r));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  for (size_t r = 0; r < errors.size(); ++r) ASSERT_TRUE(errors[r].empty()) << "rank " << r << ": " << errors[r];
}

struct Mode {
  const char* name;
  GpuCommOptions opts;
  bool exact;  // sums in rank order (NVLink); NCCL adds in its own order
};

std::vector<Mode> modes() {
  Mode nvlink{"nvlink", {}, true};
  nvlink.opts.nccl = false;
  nvlink.opts.nvlink_max_bytes = size_t(4) << 20;
  Mode nccl{"nccl", {}, false};
  nccl.opts.nvlink_max_bytes = 0;
  return {nvlink, nccl};
}

class GpuComm : public ::testing::TestWithParam<int> {};

TEST_P(GpuComm, AllReduceAndGatherEqualTheHost) {
  const int n = GetParam();
  if (gpus() < n) GTEST_SKIP() << "needs " << n << " GPUs, have " << gpus();
  std::vector<int> devices;
  for (int r = 0; r < n; ++r) devices.push_back(r);
  for (const Mode& mode : modes()) {
    std::vector<std::unique_ptr<Collective>> comms;
    try {
      comms = make_gpu_comms(devices, mode.opts);
    } catch (const Error& e) {
      if (!mode.exact) GTEST_SKIP() << "NCCL: " << e.what();
      throw;
    }
    for (size_t count : {size_t(1), size_t(100), size_t(4096), size_t(65539), size_t(300000)}) {
      std::vector<std::vector<float>> in(static_cast<size_t>(n)), out(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) in[size_t(r)] = random_floats(count, uint64_t(count * 31 + size_t(r)));
      std::vector<float> want(count, 0.0f);
      for (size_t i = 0; i < count; ++i) {
        float s = in[0][i];
        for (int r = 1; r < n; ++r) s += in[size_t(r)][i];
        want[i] = s;
      }
      on_ranks(devices, [&](int r) {
        cudaStream_t s;
        cudaStreamCreate(&s);
        cuda::test::DeviceBuffer src(count * sizeof(float)), dst(count * sizeof(float));
        cudaMemcpy(src.get(), in[size_t(r)].data(), count * sizeof(float), cudaMemcpyHostToDevice);
        comms[size_t(r)]->prepare(count);
        comms[size_t(r)]->all_reduce_sum(static_cast<float*>(src.get()), static_cast<float*>(dst.get()), count, s);
        cuda::test::ok(cudaStreamSynchronize(s), "all_reduce");
        out[size_t(r)].resize(count);
        cudaMemcpy(out[size_t(r)].data(), dst.get(), count * sizeof(float), cudaMemcpyDeviceToHost);
        cudaStreamDestroy(s);
      });
      for (int r = 1; r < n; ++r) EXPECT_EQ(out[size_t(r)], out[0]) << mode.name << " " << count << ": rank " << r;
      for (size_t i = 0; i < count; ++i) {
        if (mode.exact) {
          ASSERT_EQ(out[0][i], want[i]) << mode.name << " " << count << " at " << i;
        } else {
          ASSERT_NEAR(out[0][i], want[i], 1e-5f * n) << mode.name << " " << count << " at " << i;
        }
      }
    }
    // all_gather: 1001 rows split over the ranks, 3 columns, padded strides.
    const int64_t total = 1001, cols = 3;
    std::vector<std::vector<float>> gathered(static_cast<size_t>(n));
    std::vector<float> whole = random_floats(size_t(total * cols), 7);
    on_ranks(devices, [&](int r) {
      cudaStream_t s;
      cudaStreamCreate(&s);
      const Range mine = split_range(total, n, r);
      const size_t src_ld = size_t(mine.size()) + 2, dst_ld = size_t(total) + 5;
      std::vector<float> part(src_ld * size_t(cols), NAN);
      for (int64_t c = 0; c < cols; ++c)
        for (int64_t i = 0; i < mine.size(); ++i) part[size_t(c) * src_ld + size_t(i)] = whole[size_t(c * total + mine.begin + i)];
      cuda::test::DeviceBuffer src(part.size() * sizeof(float)), dst(dst_ld * size_t(cols) * sizeof(float));
      cudaMemcpy(src.get(), part.data(), part.size() * sizeof(float), cudaMemcpyHostToDevice);
      comms[size_t(r)]->prepare(size_t(total * cols));
      comms[size_t(r)]->all_gather_rows(static_cast<float*>(src.get()), src_ld, static_cast<float*>(dst.get()), dst_ld, total, cols, s);
      cuda::test::ok(cudaStreamSynchronize(s), "all_gather");
      std::vector<float> got(dst_ld * size_t(cols));
      cudaMemcpy(got.data(), dst.get(), got.size() * sizeof(float), cudaMemcpyDeviceToHost);
      for (int64_t c = 0; c < cols; ++c)
        for (int64_t i = 0; i < total; ++i) gathered[size_t(r)].push_back(got[size_t(c) * dst_ld + size_t(i)]);
      cudaStreamDestroy(s);
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(gathered[size_t(r)], whole) << mode.name << " all_gather, rank " << r;
  }
}

// The NVLink kernel recorded in a CUDA graph and replayed: its call counter
// lives on the device, so replays keep agreeing between ranks.
TEST_P(GpuComm, AllReduceReplayedInACudaGraph) {
  const int n = GetParam();
  if (gpus() < n) GTEST_SKIP() << "needs " << n << " GPUs, have " << gpus();
  std::vector<int> devices;
  for (int r = 0; r < n; ++r) devices.push_back(r);
  GpuCommOptions o;
  o.nccl = false;
  auto comms = make_gpu_comms(devices, o);
  const size_t count = 4096;
  std::vector<std::vector<float>> results(static_cast<size_t>(n));
  on_ranks(devices, [&](int r) {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cuda::test::DeviceBuffer buf(count * sizeof(float));
    const std::vector<float> ones(count, float(r + 1));
    cudaMemcpy(buf.get(), ones.data(), count * sizeof(float), cudaMemcpyHostToDevice);
    cudaGraph_t g;
    cuda::test::ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
    for (int k = 0; k < 5; ++k) comms[size_t(r)]->all_reduce_sum(static_cast<float*>(buf.get()), static_cast<float*>(buf.get()), count, s);
    cuda::test::ok(cudaStreamEndCapture(s, &g), "end capture");
    cudaGraphExec_t exec;
    cuda::test::ok(cudaGraphInstantiate(&exec, g, 0), "instantiate");
    for (int rep = 0; rep < 3; ++rep) cuda::test::ok(cudaGraphLaunch(exec, s), "launch");
    cuda::test::ok(cudaStreamSynchronize(s), "replays");
    results[size_t(r)].resize(count);
    cudaMemcpy(results[size_t(r)].data(), buf.get(), count * sizeof(float), cudaMemcpyDeviceToHost);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
  });
  // 15 in-place sums of (1 + 2 + ... + n) times the start: x_{k+1} = n * x_k
  // after the first (every rank holds the same value from then on).
  double want = n * (n + 1) / 2.0;
  for (int k = 1; k < 15; ++k) want *= n;
  for (int r = 0; r < n; ++r) EXPECT_FLOAT_EQ(results[size_t(r)][count - 1], float(want)) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Ranks, GpuComm, ::testing::Values(2, 4), [](const auto& i) {
  return std::to_string(i.param) + "gpus";
});

}  // namespace
}  // namespace weir
