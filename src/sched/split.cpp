#include "sched/split.h"

#include <algorithm>
#include <unordered_map>

namespace weir::sched {
namespace {

void add_once(std::vector<int>& v, int x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
}

// Bytes from the start of a view's storage to the end of the last element
// it sees.
size_t extent(const Tensor& v) {
  size_t end = v.view_offset + row_bytes(v.dtype, v.ne[0]);
  for (int i = 1; i < kMaxDims; ++i) end += size_t(v.ne[i] - 1) * v.nb[i];
  return end;
}

}  // namespace

int SplitPlan::host_waits() const {
  int n = 0;
  for (const Run& r : runs) n += int(r.host_waits_on.size());
  return n;
}

SplitPlan split_graph(const Graph& g, const Assignment& a, const std::vector<bool>& host_visible) {
  SplitPlan plan;
  const auto& ts = g.tensors();
  std::vector<int> run_of(ts.size(), -1);  // by tensor id: the run that computes it
  for (const Tensor& t : ts) {
    if (t.op == Op::Leaf || t.op == Op::View) continue;
    const int b = a.backend[size_t(t.id)];
    const bool streamed = a.streamed[size_t(t.id)];
    if (plan.runs.empty() || plan.runs.back().backend != b || streamed || plan.runs.back().streamed) {
      plan.runs.emplace_back();
      plan.runs.back().backend = b;
      plan.runs.back().streamed = streamed;
    }
    plan.runs.back().nodes.push_back(&t);
    run_of[size_t(t.id)] = int(plan.runs.size()) - 1;
  }
  auto is_device = [&](int b) { return b >= 0 && !host_visible[size_t(b)]; };

  std::vector<bool> is_output(ts.size(), false);
  for (const Tensor* o : g.outputs()) is_output[size_t(o->storage()->id)] = true;
  std::vector<std::vector<int>> kept(plan.runs.size());  // tensor ids each run keeps alive
  for (size_t r = 0; r < plan.runs.size(); ++r) {
    Run& run = plan.runs[r];
    std::vector<const Tensor*> seen;
    for (const Tensor* n : run.nodes)
      for (const Tensor* s : n->src) {
        if (!s) continue;
        const Tensor* st = s->storage();
        if (std::find(seen.begin(), seen.end(), st) != seen.end()) continue;
        seen.push_back(st);
        const int producer = run_of[size_t(st->id)];
        if (producer == int(r)) continue;  // made in this run
        if (producer >= 0) {
          kept[size_t(producer)].push_back(st->id);
          const int from = plan.runs[size_t(producer)].backend;
          if (from == run.backend) continue;  // the same backend's memory, read in place
          run.copies_in.push_back({st, from});
          if (is_device(from) && !is_device(run.backend)) add_once(run.host_waits_on, from);
          else if (is_device(from)) add_once(run.device_waits_on, from);
          continue;
        }
        // A leaf: a graph input copied to a device that reads it; state read
        // on another backend than its home copied there (the window this
        // run's views reach); weights read where they are.
        if (st->op != Op::Leaf) continue;
        const int home = a.backend[size_t(st->id)];
        if (home == kHost && is_device(run.backend)) {
          run.copies_in.push_back({st, kHost});
        } else if (home >= 0 && home != run.backend && a.state[size_t(st->id)]) {
          size_t reach = 0;
          for (const Tensor* m : run.nodes)
            for (const Tensor* v : m->src)
              if (v && v->storage() == st) reach = std::max(reach, extent(*v));
          run.copies_in.push_back({st, home, std::min(reach, st->n_bytes())});
          if (is_device(home) && !is_device(run.backend)) add_once(run.host_waits_on, home);
          else if (is_device(home)) add_once(run.device_waits_on, home);
        }
      }
  }
  for (const Tensor& t : ts) {
    if (run_of[size_t(t.id)] >= 0 && is_output[size_t(t.id)]) kept[size_t(run_of[size_t(t.id)])].push_back(t.id);
  }
  for (size_t r = 0; r < plan.runs.size(); ++r) {
    std::vector<int>& k = kept[r];
    std::sort(k.begin(), k.end());
    k.erase(std::unique(k.begin(), k.end()), k.end());
    for (int id : k) plan.runs[r].outputs.push_back(&ts[size_t(id)]);
  }
  return plan;
}

}  // namespace weir::sched
