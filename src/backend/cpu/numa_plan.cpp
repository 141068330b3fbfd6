#include "backend/cpu/numa_plan.h"

#include <sched.h>

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace weir::cpu {

const char* numa_mode_name(NumaMode m) {
  switch (m) {
    case NumaMode::Off: return "off";
    case NumaMode::Distribute: return "distribute";
    case NumaMode::Isolate: return "isolate";
  }
  return "?";
}

bool parse_numa_mode(std::string_view s, NumaMode* out) {
  for (NumaMode m : {NumaMode::Off, NumaMode::Distribute, NumaMode::Isolate})
    if (s == numa_mode_name(m)) {
      *out = m;
      return true;
    }
  return false;
}

void NumaPlan::rows(int g, int64_t n, int64_t align, int64_t* begin, int64_t* end) const {
  const int64_t units = (n + align - 1) / align;
  const int64_t total = n_threads();
  const int64_t before = groups[g].first_thread, upto = before + groups[g].n_threads;
  *begin = std::min(n, units * before / total * align);
  *end = g + 1 == int(groups.size()) ? n : std::min(n, units * upto / total * align);
}

std::string NumaPlan::describe() const {
  std::string s = numa_mode_name(mode);
  s += ':';
  for (size_t g = 0; g < groups.size(); ++g) {
    s += (g ? ", node " : " node ") + std::to_string(groups[g].node) + " (" +
         std::to_string(groups[g].n_threads) + " threads";
    if (!groups[g].cpus.empty()) s += ", CPUs " + format_cpulist(groups[g].cpus);
    s += ')';
  }
  if (place_weights) s += ", weights placed per node";
  return s;
}

NumaPlan make_numa_plan(const NumaTopology& topo, NumaMode mode, int n_threads, int start_cpu) {
  if (n_threads < 1) throw Error("numa plan: thread count must be at least 1");
  NumaPlan p;
  p.mode = mode;
  auto add_group = [&](int node, std::vector<int> cpus, int n) {
    p.groups.push_back({node, std::move(cpus), p.n_threads(), n});
    p.group_of_thread.insert(p.group_of_thread.end(), n, int(p.groups.size()) - 1);
  };
  if (mode == NumaMode::Off || topo.n_usable_nodes() == 0) {
    p.mode = NumaMode::Off;  // nothing usable to pin to: behave as off
    add_group(topo.nodes.empty() ? 0 : topo.nodes[0].id, {}, n_threads);
    return p;
  }
  if (mode == NumaMode::Isolate) {
    if (start_cpu < 0) start_cpu = sched_getcpu();
    int i = topo.node_of_cpu(start_cpu);
    if (i < 0 || topo.nodes[i].usable.empty())  // started somewhere we may not stay: first usable node
      i = int(std::find_if(topo.nodes.begin(), topo.nodes.end(), [](const NumaNode& n) { return !n.usable.empty(); }) -
              topo.nodes.begin());
    add_group(topo.nodes[i].id, topo.nodes[i].usable, n_threads);
  } else {
    // Largest remainder: node i gets n_threads * usable_i / total, rounded so
    // the counts add up; ties go to the lower node id.
    std::vector<const NumaNode*> nodes;
    for (const NumaNode& n : topo.nodes)
      if (!n.usable.empty()) nodes.push_back(&n);
    int64_t total = 0;
    for (const NumaNode* n : nodes) total += int64_t(n->usable.size());
    std::vector<int> count(nodes.size());
    std::vector<std::pair<int64_t, int>> rem;  // (-remainder, index)
    int given = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
      const int64_t share = int64_t(n_threads) * int64_t(nodes[i]->usable.size());
      count[i] = int(share / total);
      given += count[i];
      rem.emplace_back(-(share % total), int(i));
    }
    std::sort(rem.begin(), rem.end());
    for (int k = 0; given < n_threads; ++k, ++given) ++count[rem[size_t(k)].second];
    for (size_t i = 0; i < nodes.size(); ++i)
      if (count[i] > 0) add_group(nodes[i]->id, nodes[i]->usable, count[i]);
  }
  p.place_weights = topo.nodes.size() > 1;
  return p;
}

}  // namespace weir::cpu
