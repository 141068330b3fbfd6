// The scheduler's pure parts on hand-made graphs: which backend runs each
// node (assign.h's rules), the runs, the copies and the waits (split.h).
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "sched/assign.h"
#include "sched/split.h"

namespace weir::sched {
namespace {

constexpr int kCpu = 0, kGpu = 1;

// Two layers: x -> norm -> mul(w_norm) -> mul_mat(w1) -> add(x) -> norm ->
// mul(w_norm2) -> mul_mat(w2) -> logits; homes given per weight.
struct Net {
  Graph g;
  std::vector<float> storage = std::vector<float>(64 * 64 * 4, 0.0f);
  Tensor *x, *wn1, *w1, *wn2, *w2, *n1, *m1, *p1, *a1, *n2, *m2, *out;
  std::map<const Tensor*, int> home;
  Net(int h1, int h2, int64_t T = 1) {
    x = g.input(DType::F32, {64, T}, "x");
    wn1 = g.external(DType::F32, {64}, storage.data(), "norm1");
    w1 = g.external(DType::F32, {64, 64}, storage.data() + 64, "w1");
    wn2 = g.external(DType::F32, {64}, storage.data() + 64 * 65, "norm2");
    w2 = g.external(DType::F32, {64, 64}, storage.data() + 64 * 66, "w2");
    n1 = g.rms_norm(x, 1e-6f);
    m1 = g.mul(n1, wn1);
    p1 = g.mul_mat(w1, m1);
    a1 = g.add(p1, x);
    n2 = g.rms_norm(a1, 1e-6f);
    m2 = g.mul(n2, wn2);
    out = g.mul_mat(w2, m2);
    g.mark_output(out);
    home = {{wn1, h1}, {w1, h1}, {wn2, h2}, {w2, h2}};
  }
  AssignRules rules(int offload = -1) const {
    AssignRules r;
    r.host_visible = {true, false};
    r.supports = [](int, const Tensor&) { return true; };
    r.weight_home = [this](const Tensor&, const Tensor& leaf) {
      auto it = home.find(&leaf);
      return it == home.end() ? kHost : it->second;
    };
    r.state_home = [](const Tensor&) { return kHost; };
    r.offload_backend = offload;
    return r;
  }
};

TEST(Assign, NodesFollowTheirWeightsAndTheRestFollowTheGpu) {
  Net n(kCpu, kGpu);
  const Assignment a = assign_backends(n.g, n.rules());
  auto at = [&](const Tensor* t) { return a.backend[size_t(t->id)]; };
  EXPECT_EQ(at(n.x), kHost);  // a graph input
  EXPECT_EQ(at(n.m1), kCpu);
  EXPECT_EQ(at(n.p1), kCpu);
  EXPECT_EQ(at(n.n1), kCpu);  // inputs on the host, its reader on the CPU
  EXPECT_EQ(at(n.a1), kGpu);  // one host product (and an input): pulled over with the norm
  EXPECT_EQ(at(n.n2), kGpu);  // its reader on the GPU: pulled over
  EXPECT_EQ(at(n.m2), kGpu);
  EXPECT_EQ(at(n.out), kGpu);
}

TEST(Split, RunsCopiesAndWaits) {
  Net n(kGpu, kCpu);  // layer 1 on the GPU, the head on the CPU
  const AssignRules r = n.rules();
  const Assignment a = assign_backends(n.g, r);
  const SplitPlan p = split_graph(n.g, a, r.host_visible);
  ASSERT_EQ(p.runs.size(), 2u);
  EXPECT_EQ(p.runs[0].backend, kGpu);
  EXPECT_EQ(p.runs[1].backend, kCpu);
  // The GPU run copies in the input x (once, though two nodes read it).
  ASSERT_EQ(p.runs[0].copies_in.size(), 1u);
  EXPECT_EQ(p.runs[0].copies_in[0].tensor, n.x);
  EXPECT_EQ(p.runs[0].copies_in[0].from, kHost);
  EXPECT_TRUE(p.runs[0].host_waits_on.empty());
  // The norm without a weight runs with what it reads (rule 3), on the
  // GPU; the CPU run reads its result: one copy, one host wait.
  ASSERT_EQ(p.runs[1].copies_in.size(), 1u);
  EXPECT_EQ(p.runs[1].copies_in[0].tensor, n.n2);
  EXPECT_EQ(p.runs[1].host_waits_on, std::vector<int>{kGpu});
  EXPECT_EQ(p.host_waits(), 1);
  // The GPU run keeps what the CPU run copies; the CPU run keeps the output.
  EXPECT_EQ(p.runs[0].outputs, std::vector<const Tensor*>{n.n2});
  EXPECT_EQ(p.runs[1].outputs, std::vector<const Tensor*>{n.out});
}

TEST(Split, OneBackendIsOneRunWithoutWaits) {
  Net n(kCpu, kCpu);
  const AssignRules r = n.rules();
  const SplitPlan p = split_graph(n.g, assign_backends(n.g, r), r.host_visible);
  ASSERT_EQ(p.runs.size(), 1u);
  EXPECT_TRUE(p.runs[0].copies_in.empty());  // the CPU reads the input in place
  EXPECT_EQ(p.host_waits(), 0);
}

TEST(Assign, OpOffloadTakesBigBatchesOfHostProductsOnly) {
  for (int64_t T : {1, 31, 32, 512}) {
    Net n(kCpu, kCpu, T);
    const Assignment a = assign_backends(n.g, n.rules(kGpu));
    const bool big = T >= 32;
    EXPECT_EQ(a.backend[size_t(n.p1->id)], big ? kGpu : kCpu) << T;
    EXPECT_EQ(a.streamed[size_t(n.p1->id)], big) << T;
    // A host norm scale (a vector) does not hold its node back in an
    // offloaded batch: it goes with the products.
    EXPECT_EQ(a.backend[size_t(n.m1->id)], big ? kGpu : kCpu) << T;
  }
}

TEST(Assign, UnsupportedNodesGoToTheHostBackend) {
  Net n(kGpu, kGpu);
  AssignRules r = n.rules();
  r.supports = [](int b, const Tensor& t) { return b == kCpu || t.op != Op::RmsNorm; };
  const Assignment a = assign_backends(n.g, r);
  EXPECT_EQ(a.backend[size_t(n.n1->id)], kCpu);
  EXPECT_EQ(a.backend[size_t(n.n2->id)], kCpu);
  EXPECT_EQ(a.backend[size_t(n.p1->id)], kGpu);
}

}  // namespace
}  // namespace weir::sched
