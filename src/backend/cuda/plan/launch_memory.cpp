#include "backend/cuda/plan/launch_memory.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"

namespace weir::cuda {

ActivationPlan plan_launch_memory(const Graph& g, const LaunchPlan& p) {
  std::vector<size_t> launch_end(p.nodes.size());
  for (const Launch& l : p.launches)
    for (size_t k = l.first; k < l.end; ++k) launch_end[k] = l.memory_end - 1;
  return plan_activations(g, p.nodes, launch_end);
}

void place_activations(Graph& g, const ActivationPlan& a, void* base) {
  char* b = static_cast<char*>(base);
  for (Tensor& t : g.tensors()) {
    if (t.op == Op::View || t.op == Op::SetRows)
      t.data = static_cast<char*>(t.view_src->data) + t.view_offset;
    else if (t.op != Op::Leaf || t.data == nullptr)
      t.data = b + a.offset[size_t(t.id)];
  }
}

void check_launch_memory(const LaunchPlan& p) {
  const auto overlap = [](const Tensor* a, const Tensor* b) {
    const auto* x = static_cast<const char*>(a->data);
    const auto* y = static_cast<const char*>(b->data);
    return x && y && x < y + b->n_bytes() && y < x + a->n_bytes();
  };
  for (const Launch& l : p.launches) {
    const size_t begin = l.first, end = l.memory_end;
    const auto inside = [&](const Tensor* t) {
      for (size_t k = begin; k < end; ++k)
        if (p.nodes[k] == t) return true;
      return false;
    };
    for (size_t k = begin; k < end; ++k) {
      const Tensor* out = p.nodes[k];
      if (out->op == Op::SetRows) continue;  // writes its table, which no member reads
      for (size_t j = begin; j < end; ++j)
        for (const Tensor* s : p.nodes[j]->src)
          if (s && !inside(s->storage()) && s->storage()->op != Op::Leaf && overlap(out, s->storage()))
            throw Error("cuda backend: the launch at node " + std::to_string(l.first) + " (" + p.label(l) +
                        ") writes " + out->name + " over its input " + s->storage()->name);
    }
  }
}

}  // namespace weir::cuda
