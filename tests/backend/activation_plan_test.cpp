// Activation memory by launch (backend/activation_plan.h): no launch's output
// lands on memory an input of the same launch still holds, checked on byte
// ranges computed here from the offsets.
#include "backend/activation_plan.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace weir {
namespace {

struct Range {
  size_t a, b;  // [a, b)
};
Range range_of(const ActivationPlan& p, const Tensor* t) {
  const Tensor* s = t->storage();
  return {p.offset[size_t(s->id)], p.offset[size_t(s->id)] + s->n_bytes()};
}
bool overlaps(Range x, Range y) { return x.a < y.b && y.a < x.b; }

std::vector<Tensor*> nodes_of(Graph& g) {
  std::vector<Tensor*> v;
  for (Tensor& t : g.tensors())
    if (t.op != Op::Leaf && t.op != Op::View) v.push_back(&t);
  return v;
}

// n scale nodes one after the other from x.
Tensor* scale_chain(Graph& g, Tensor* x, int n) {
  for (int i = 0; i < n; ++i) x = g.scale(x, 2.0f);
  return x;
}

// Launch ends for nodes that each run alone.
std::vector<size_t> each_alone(size_t n) {
  std::vector<size_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

// The first launch whose output overlaps an input from outside it, or "".
std::string launch_overwrite(const ActivationPlan& p, const std::vector<Tensor*>& nodes,
                             const std::vector<size_t>& end) {
  for (size_t i = 0; i < nodes.size(); i = end[i] + 1)
    for (size_t k = i; k <= end[i]; ++k)
      for (size_t j = i; j <= end[i]; ++j)
        for (const Tensor* s : nodes[j]->src) {
          if (!s || !p.in_arena[size_t(s->storage()->id)]) continue;
          bool inside = false;
          for (size_t m = i; m <= end[i]; ++m) inside = inside || nodes[m] == s->storage();
          if (!inside && overlaps(range_of(p, nodes[k]), range_of(p, s))) {
            std::string r = nodes[k]->name;
            return r.append(" over ").append(s->storage()->name);
          }
        }
  return "";
}

// The residual stream's pattern: a = x + x, then rms_norm(a) * w fused.
struct NormGraph {
  Graph g;
  std::vector<float> w = std::vector<float>(64, 1.0f);
  NormGraph() {
    Tensor* x = g.input(DType::F32, {64, 8}, "x");
    Tensor* a = g.add(x, x);
    a->name = std::string("a");
    Tensor* m = g.mul(g.rms_norm(a, 1e-6f), g.external(DType::F32, {64}, w.data(), "w"));
    m->name = std::string("normed");
    g.mark_output(g.add(m, x));
  }
};

TEST(ActivationPlan, FusedNormDoesNotWriteOverItsInput) {
  NormGraph ng;
  const auto nodes = nodes_of(ng.g);  // add, rms_norm, mul, add
  ASSERT_EQ(nodes.size(), 4u);
  const std::vector<size_t> fused = {0, 2, 2, 3};  // rms_norm and mul as one launch
  const ActivationPlan p = plan_activations(ng.g, nodes, fused);
  EXPECT_EQ(launch_overwrite(p, nodes, fused), "");
  // Node by node, the mul may reuse a's memory (a's last reader, the norm,
  // has run): the same check, told the norm and mul are one launch, catches
  // it. This is the plan the fused launch must not get.
  const std::vector<size_t> alone = each_alone(4);
  const ActivationPlan q = plan_activations(ng.g, nodes, alone);
  EXPECT_EQ(launch_overwrite(q, nodes, fused), "normed over a");
  EXPECT_EQ(launch_overwrite(q, nodes, alone), "");
}

TEST(ActivationPlan, ReusesMemoryAcrossLaunches) {
  Graph g;
  Tensor* x = g.input(DType::F32, {256, 4}, "x");
  g.mark_output(scale_chain(g, x, 6));
  const auto nodes = nodes_of(g);
  const std::vector<size_t> alone = each_alone(nodes.size());
  const ActivationPlan p = plan_activations(g, nodes, alone);
  // The input and two tensors in flight at a time: a chain needs no more.
  EXPECT_LE(p.bytes, 3 * arena_align_up(256 * 4 * sizeof(float)));
  EXPECT_EQ(launch_overwrite(p, nodes, alone), "");
}

// Graph inputs and outputs keep their memory to the end of the run: nodes
// after them take other memory.
TEST(ActivationPlan, OutputsAndInputsLiveForTheWholeRun) {
  Graph g;
  Tensor* x = g.input(DType::F32, {256, 4}, "x");
  Tensor* out = g.scale(g.add(x, x), 2.0f);
  g.mark_output(out);
  g.mark_output(scale_chain(g, out, 4));
  const auto nodes = nodes_of(g);
  const std::vector<size_t> alone = each_alone(nodes.size());
  const ActivationPlan p = plan_activations(g, nodes, alone);
  for (size_t i = 0; i < nodes.size(); ++i) {
    EXPECT_FALSE(overlaps(range_of(p, nodes[i]), range_of(p, x))) << i;
    if (nodes[i] != out) {
      EXPECT_FALSE(overlaps(range_of(p, nodes[i]), range_of(p, out))) << i;
    }
  }
}

}  // namespace
}  // namespace weir
