#include "sched/split.h"

#include <algorithm>
#include <unordered_map>

namespace weir::sched {

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
    if (plan.runs.empty() || plan.runs.back().backend != b) {
      plan.runs.emplace_back();
      plan.runs.back().backend = b;
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
          if (is_device(from) && !is_device(run.backend)) {
            if (std::find(run.host_waits_on.begin(), run.host_waits_on.end(), from) == run.host_waits_on.end())
              run.host_waits_on.push_back(from);
          } else if (is_device(from)) {
            if (std::find(run.device_waits_on.begin(), run.device_waits_on.end(), from) ==
                run.device_waits_on.end())
              run.device_waits_on.push_back(from);
          }
          continue;
        }
        // A leaf: a graph input copied to a device that reads it; weights
        // and state are read where they are.
        if (st->op == Op::Leaf && a.backend[size_t(st->id)] == kHost && is_device(run.backend))
          run.copies_in.push_back({st, kHost});
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
