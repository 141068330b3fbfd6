// The CPU executor: graph planning (memory reuse), running, the contract's
// host-wait accounting, and error propagation without deadlock.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <string>
#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/collective.h"
#include "core/graph.h"

namespace weir {
namespace {

TEST(CpuBackend, RunsAGraphAndMatchesHandComputation) {
  for (int threads : {1, 2, 3}) {
    CpuBackend b(threads);
    Graph g;
    std::vector<float> w(8 * 5);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1, 1);
    for (float& v : w) v = u(rng);
    Tensor* W = g.external(DType::F32, {8, 5}, w.data(), "w");
    Tensor* x = g.input(DType::F32, {8, 3}, "x");
    Tensor* y = g.add(g.mul_mat(W, x), g.scale(g.mul_mat(W, x), 2.0f));  // 3 W x
    g.mark_output(y);
    b.plan(g);
    for (int rep = 0; rep < 3; ++rep) {
      float* xd = static_cast<float*>(x->data);
      for (int i = 0; i < 24; ++i) xd[i] = u(rng);
      b.queue().run(g);
      b.queue().synchronize();
      const float* yd = static_cast<const float*>(y->data);
      for (int t = 0; t < 3; ++t)
        for (int n = 0; n < 5; ++n) {
          double ref = 0;
          for (int k = 0; k < 8; ++k) ref += double(w[size_t(n * 8 + k)]) * xd[t * 8 + k];
          EXPECT_NEAR(yd[t * 5 + n], 3 * ref, 1e-5) << threads;
        }
    }
    EXPECT_EQ(b.stats().graphs_run, 3u);
    EXPECT_EQ(b.stats().host_waits, 3u);
  }
}

// A one-rank collective that takes its time: the node after it (run by all
// threads, in chunks) must read what it wrote, not what was there before.
class SlowCollective final : public Collective {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string kind() const override { return "slow"; }
  void all_reduce_sum(const float* src, float* dst, size_t n, void*) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (size_t i = 0; i < n; ++i) dst[i] = src[i];
  }
  void all_gather_rows(const float* src, size_t src_ld, float* dst, size_t dst_ld, int64_t total, int64_t cols,
                       void*) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t r = 0; r < total; ++r) dst[size_t(c) * dst_ld + size_t(r)] = src[size_t(c) * src_ld + size_t(r)];
  }
  void abort(const std::string&) override {}
};

TEST(CpuBackend, NodesAfterACollectiveWaitForIt) {
  SlowCollective comm;
  CpuBackend b(4);
  Graph g;
  Tensor* x = g.input(DType::F32, {4096, 4}, "x");
  Tensor* y = g.scale(g.all_reduce(g.scale(x, 2.0f), &comm), 3.0f);  // 6 x, the middle one slow
  g.mark_output(y);
  b.plan(g);
  for (int rep = 0; rep < 3; ++rep) {
    float* xd = static_cast<float*>(x->data);
    for (int i = 0; i < 4096 * 4; ++i) xd[i] = float(i % 97 + rep);
    b.queue().run(g);
    b.queue().synchronize();
    const float* yd = static_cast<const float*>(y->data);
    int wrong = 0;
    for (int i = 0; i < 4096 * 4; ++i) wrong += yd[i] != 6.0f * float(i % 97 + rep);
    EXPECT_EQ(wrong, 0) << "rep " << rep;
  }
}

TEST(CpuBackend, PlannerReusesMemoryAlongAChain) {
  CpuBackend b(1);
  Graph g;
  Tensor* x = g.input(DType::F32, {1024}, "x");
  Tensor* t = x;
  for (int i = 0; i < 20; ++i) t = g.scale(t, 1.5f);
  g.mark_output(t);
  b.plan(g);
  // input + two alternating buffers, not 21 buffers
  EXPECT_LE(b.planned_bytes(g), 3u * 1024 * sizeof(float));
  std::fill_n(static_cast<float*>(x->data), 1024, 1.0f);
  b.queue().run(g);
  EXPECT_FLOAT_EQ(static_cast<float*>(t->data)[7], std::pow(1.5f, 20.0f));
}

TEST(CpuBackend, KernelErrorsReachTheCallerWithoutDeadlock) {
  CpuBackend b(3);
  Graph g;
  std::vector<float> cache(4 * 8, 0.0f);
  Tensor* c = g.external(DType::F32, {4, 8}, cache.data(), "cache");
  Tensor* src = g.input(DType::F32, {4, 2}, "src");
  Tensor* idx = g.input(DType::I32, {2}, "idx");
  Tensor* out = g.scale(g.set_rows(c, src, idx), 1.0f);
  g.mark_output(out);
  b.plan(g);
  static_cast<int32_t*>(idx->data)[0] = 1;
  static_cast<int32_t*>(idx->data)[1] = 99;  // out of range
  EXPECT_THROW(b.queue().run(g), Error);
  static_cast<int32_t*>(idx->data)[1] = 2;
  EXPECT_NO_THROW(b.queue().run(g));  // the pool is still usable
}

TEST(CpuBackend, RunBeforePlanIsAnError) {
  CpuBackend b(1);
  Graph g;
  g.scale(g.input(DType::F32, {4}, "x"), 2.0f);
  EXPECT_THROW(b.queue().run(g), Error);
}

}  // namespace
}  // namespace weir
