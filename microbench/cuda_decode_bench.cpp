// Micro-benchmark of the CUDA decode products of 4-bit types, the lookup
// types (iq4_xs, iq4_nl, mxfp4) beside q4_K and q4_0: one product of 65536
// rows (bigger than L2), 1 and 4 tokens, and gpt-oss-20b's expert products
// (4 of 32 mxfp4 experts of 2880 x 2880). Printed as the weight bytes read
// per second, not asserted; skips without a GPU.
// Run: build/microbench/weir_microbench_cuda --gtest_filter='CudaDecode.*'
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/registry.h"
#include "core/graph.h"
#include "core/quant/random_blocks.h"
#include "cuda/cuda_test_util.h"

namespace weir {
namespace {

// Seconds a run of the graph takes: planned once, inputs copied once, three
// runs to warm up (the first eager, then replays of a recorded CUDA graph),
// then reps more, queued back to back.
double time_graph(Backend& b, const std::function<Tensor*(Graph&)>& build,
                  const std::vector<std::pair<std::string, std::vector<uint8_t>>>& in, int reps) {
  Graph g;
  Tensor* out = build(g);
  g.mark_output(out);
  b.plan(g);
  for (Tensor& t : g.tensors())
    for (const auto& [name, data] : in)
      if (t.op == Op::Leaf && t.name == name) b.queue().copy_to_device(t.data, data.data(), data.size());
  for (int i = 0; i < 3; ++i) b.queue().run(g);
  b.queue().synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) b.queue().run(g);
  b.queue().synchronize();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  b.release(g);
  return s;
}

TEST(CudaDecode, FourBitTypes) {
  WEIR_REQUIRE_GPU();
  CudaOptions o;
  auto gpu = make_cuda_backend(o);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (DType wt : {DType::Q4_K, DType::Q4_0, DType::IQ4_XS, DType::IQ4_NL, DType::MXFP4}) {
    for (int64_t K : {int64_t(4096), int64_t(2880)}) {
      if (K % traits(wt).block_size) continue;
      const int64_t N = 65536;
      std::vector<uint8_t> w(row_bytes(wt, K) * size_t(N));
      quant::random_fill(wt, w.data(), K * N, 0.0f, 0.05f, 3);
      for (int64_t T : {1, 4}) {
        std::vector<float> x(size_t(K * T));
        for (float& v : x) v = nd(rng);
        std::vector<uint8_t> xb(x.size() * 4);
        std::memcpy(xb.data(), x.data(), xb.size());
        const double s = time_graph(*gpu, [&](Graph& g) {
          return g.mul_mat(g.external(wt, {K, N}, w.data(), "w"), g.input(DType::F32, {K, T}, "x"));
        }, {{"x", xb}}, 50);
        std::printf("mul_mat %-7s K %5lld N %lld T %lld: %8.1f us  %7.1f GB/s\n", dtype_name(wt), (long long)K,
                    (long long)N, (long long)T, s * 1e6, double(w.size()) / s / 1e9);
      }
    }
  }
  // gpt-oss-20b's experts: 32 experts of 2880 x 2880 (gate, up; down), 4 a token.
  for (DType wt : {DType::MXFP4, DType::Q4_0}) {
    const int64_t E = 32, k = 4, K = 2880, N = 2880;
    std::vector<uint8_t> w(row_bytes(wt, K) * size_t(N * E));
    quant::random_fill(wt, w.data(), K * N * E, 0.0f, 0.05f, 4);
    for (int64_t T : {1, 2}) {
      std::vector<float> x(size_t(K * T));
      for (float& v : x) v = nd(rng);
      std::vector<uint8_t> xb(x.size() * 4);
      std::memcpy(xb.data(), x.data(), xb.size());
      std::vector<int32_t> ids(size_t(k * T));
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7) % E);
      std::vector<uint8_t> ib(ids.size() * 4);
      std::memcpy(ib.data(), ids.data(), ib.size());
      const double s = time_graph(*gpu, [&](Graph& g) {
        return g.mul_mat_id(g.external(wt, {K, N, E}, w.data(), "w"), g.input(DType::F32, {K, 1, T}, "x"),
                            g.input(DType::I32, {k, T}, "ids"));
      }, {{"x", xb}, {"ids", ib}}, 200);
      const double bytes = double(row_bytes(wt, K) * size_t(N)) * double(k * T);
      std::printf("mul_mat_id %-7s E %lld k %lld K %lld N %lld T %lld: %8.1f us  %7.1f GB/s (of the picked experts)\n",
                  dtype_name(wt), (long long)E, (long long)k, (long long)K, (long long)N, (long long)T, s * 1e6,
                  bytes / s / 1e9);
    }
  }
}

}  // namespace
}  // namespace weir
