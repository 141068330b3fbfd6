// Where each node's output goes in a graph's activation memory (one arena),
// when a backend runs the nodes in launches: fused or grouped nodes run as
// one launch, whose blocks run in no set order. A tensor is freed only after
// the last node of the last launch that reads it, so no output of a launch
// takes memory that an input of the same launch still holds. (Freeing after
// the last reading *node* let a fused norm's output land over its own
// input, shifted: its blocks raced.)
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "backend/arena_planner.h"
#include "core/graph.h"

namespace weir {

struct ActivationPlan {
  std::vector<size_t> offset;  // by tensor id: graph inputs and node outputs
  std::vector<bool> in_arena;  // by tensor id: offset is meaningful
  std::vector<size_t> extra_offset;  // by ExtraBuffer, in the order given
  size_t bytes = 0;                  // the arena's size
};

// Memory a backend needs beside the nodes' outputs (the CPU's rounded copy
// of x that products read): held from before node `first`'s output is
// placed until after node `last` (positions in nodes), so it never overlaps
// the outputs of the nodes that read it.
struct ExtraBuffer {
  size_t first = 0, last = 0;
  size_t bytes = 0;
};

// nodes: the graph's nodes in run order (no leaves or views); launch_end[i]:
// the position in nodes of the last node of node i's launch. Inputs (leaves
// without data) live for the whole run, as do the graph's outputs; set_rows
// writes its destination and takes no memory. The CPU and CUDA backends
// both plan with it.
inline ActivationPlan plan_activations(const Graph& g, const std::vector<Tensor*>& nodes,
                                       const std::vector<size_t>& launch_end,
                                       const std::vector<ExtraBuffer>& extra = {}) {
  const size_t n = g.tensors().size(), nn = nodes.size();
  std::vector<long> last_use(n, -1);  // position in nodes
  for (size_t i = 0; i < nn; ++i)
    for (const Tensor* s : nodes[i]->src)
      if (s) {
        long& u = last_use[size_t(s->storage()->id)];
        u = std::max(u, long(launch_end[i]));
      }
  std::vector<bool> pinned(n, false);
  for (const Tensor* o : g.outputs()) pinned[size_t(o->storage()->id)] = true;
  std::vector<std::vector<const Tensor*>> frees(nn);  // freed after node i
  for (const Tensor* t : nodes)
    if (t->op != Op::SetRows && last_use[size_t(t->id)] >= 0 && !pinned[size_t(t->id)])
      frees[size_t(last_use[size_t(t->id)])].push_back(t);
  ActivationPlan p;
  p.offset.assign(n, 0);
  p.in_arena.assign(n, false);
  ArenaPlanner arena;
  for (const Tensor& t : g.tensors())
    if (t.op == Op::Leaf && t.data == nullptr) {
      p.offset[size_t(t.id)] = arena.alloc(t.n_bytes());
      p.in_arena[size_t(t.id)] = true;
    }
  p.extra_offset.assign(extra.size(), 0);
  for (size_t i = 0; i < nn; ++i) {
    const Tensor& t = *nodes[i];
    for (size_t k = 0; k < extra.size(); ++k)
      if (extra[k].first == i) p.extra_offset[k] = arena.alloc(extra[k].bytes);
    if (t.op != Op::SetRows) {
      p.offset[size_t(t.id)] = arena.alloc(t.n_bytes());
      p.in_arena[size_t(t.id)] = true;
    }
    for (const Tensor* f : frees[i]) arena.release(p.offset[size_t(f->id)], f->n_bytes());
    for (size_t k = 0; k < extra.size(); ++k)
      if (extra[k].last == i) arena.release(p.extra_offset[k], extra[k].bytes);
  }
  p.bytes = arena.peak();
  return p;
}

}  // namespace weir
