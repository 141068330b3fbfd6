#include "sched/assign.h"

#include <string>

#include "core/error.h"

namespace weir::sched {
namespace {

constexpr int kUndecided = -2;

bool is_leaf(const Tensor* t) { return t->op == Op::Leaf; }

// A graph input: a leaf that is neither a weight nor state.
bool is_input(const Tensor* leaf, const std::vector<int>& b) { return b[size_t(leaf->id)] == kHost; }

}  // namespace

bool offloads(const Tensor& n, const AssignRules& rules) {
  return rules.offload_backend >= 0 && n.n_rows() >= rules.offload_min_batch &&
         rules.supports(rules.offload_backend, n);
}

const Tensor* pinning_weight(const Tensor& n, const AssignRules& rules) {
  const Tensor* w = nullptr;
  switch (n.op) {
    case Op::MulMat:
    case Op::MulMatId:  // a mixture's experts: where their weights are (--cpu-moe: the CPU)
    case Op::GetRows: w = n.src[0]; break;
    case Op::Mul:
    case Op::Add: w = n.src[1]; break;
    default: return nullptr;
  }
  w = w->storage();
  if (!is_leaf(w)) return nullptr;
  const int home = rules.weight_home(n, *w);
  if (home == kHost) return nullptr;
  // Offloaded prefill: a host layer's norm scale or bias (a vector) goes
  // where the products around it go, not the products to the CPU.
  const bool host_home = home < int(rules.host_visible.size()) && rules.host_visible[size_t(home)];
  if (host_home && w->ne[1] == 1 && (n.op == Op::Mul || n.op == Op::Add) && offloads(n, rules)) return nullptr;
  return w;
}

Assignment assign_backends(const Graph& g, const AssignRules& rules) {
  const auto& ts = g.tensors();
  const size_t n = ts.size();
  Assignment a;
  a.backend.assign(n, kUndecided);
  a.streamed.assign(n, false);
  a.state.assign(n, false);
  std::vector<int>& b = a.backend;
  const int n_backends = int(rules.host_visible.size());
  auto is_device = [&](int k) { return k >= 0 && k < n_backends && !rules.host_visible[size_t(k)]; };

  std::vector<std::vector<const Tensor*>> readers(n);
  for (const Tensor& t : ts)
    for (const Tensor* s : t.src)
      if (s) readers[size_t(s->id)].push_back(&t);

  // Leaves: state where it lives; weights where they live, as their first
  // reader sees it (for views of them; the nodes that read a weight ask
  // weight_home themselves); the rest are inputs in host memory.
  for (const Tensor& t : ts) {
    if (!is_leaf(&t)) continue;
    int home = rules.state_home(t);
    a.state[size_t(t.id)] = home != kHost;
    if (home == kHost && !readers[size_t(t.id)].empty()) home = rules.weight_home(*readers[size_t(t.id)][0], t);
    b[size_t(t.id)] = home;
  }

  // Rules 1 and 2, and views.
  for (const Tensor& t : ts) {
    if (is_leaf(&t)) continue;
    int& mine = b[size_t(t.id)];
    if (t.op == Op::View) {  // follows its source (a node's may be decided later, below)
      mine = b[size_t(t.view_src->id)];
      continue;
    }
    if (t.op == Op::SetRows) {
      mine = b[size_t(t.src[0]->storage()->id)];
      if (mine == kHost) mine = kUndecided;
      continue;
    }
    if (const Tensor* w = pinning_weight(t, rules)) {
      const int home = rules.weight_home(t, *w);
      if ((t.op == Op::MulMat || t.op == Op::MulMatId) && !is_device(home) && offloads(t, rules)) {
        mine = rules.offload_backend;
        a.streamed[size_t(t.id)] = true;
      } else {
        mine = home;
      }
      continue;
    }
    for (const Tensor* s : t.src)  // state read in place (attention's K and V)
      if (s && is_leaf(s->storage()) && rules.state_home(*s->storage()) != kHost)
        mine = rules.state_home(*s->storage());
    // Offloaded prefill: attention over a host cache runs on the device,
    // the cache's window copied there (it is small next to the work).
    if (t.op == Op::Attention && mine >= 0 && !is_device(mine) && offloads(t, rules)) mine = rules.offload_backend;
  }

  // The backend a source was computed on, or kUndecided / kHost.
  auto src_backend = [&](const Tensor* s) { return b[size_t(s->id)]; };
  // Rule 3 (forward: a device input pulls the node to the device).
  for (const Tensor& t : ts) {
    if (is_leaf(&t) || b[size_t(t.id)] != kUndecided) continue;
    if (t.op == Op::View) {
      b[size_t(t.id)] = src_backend(t.view_src);
      continue;
    }
    for (const Tensor* s : t.src)
      if (s && !is_input(s->storage(), b) && is_device(src_backend(s))) {
        b[size_t(t.id)] = src_backend(s);
        break;
      }
  }
  // Rule 4 (backward: readers that agree on one device pull the node there,
  // when that copies no more than leaving it: at most one of its sources
  // was computed on the host).
  for (size_t i = n; i-- > 0;) {
    const Tensor& t = ts[i];
    if (is_leaf(&t) || b[i] != kUndecided || readers[i].empty()) continue;
    int host_sources = 0;
    for (const Tensor* s : t.src)
      if (s && !is_leaf(s->storage())) host_sources += !is_device(src_backend(s->storage()));
    if (host_sources > 1) continue;
    int agreed = kUndecided;
    bool ok = true;
    for (const Tensor* r : readers[i]) {
      const int rb = b[size_t(r->id)];
      if (!is_device(rb) || (agreed != kUndecided && rb != agreed)) {
        ok = false;
        break;
      }
      agreed = rb;
    }
    if (ok) b[i] = agreed;
  }
  // Rule 5: an input's backend, else the host backend; views follow.
  for (const Tensor& t : ts) {
    if (is_leaf(&t) || b[size_t(t.id)] != kUndecided) continue;
    if (t.op == Op::View) {
      b[size_t(t.id)] = src_backend(t.view_src);
      continue;
    }
    int pick = rules.host_backend;
    for (const Tensor* s : t.src)
      if (s && src_backend(s) >= 0) {
        pick = src_backend(s);
        break;
      }
    b[size_t(t.id)] = pick;
  }
  // Views decided before their source: follow it now.
  for (const Tensor& t : ts)
    if (t.op == Op::View) b[size_t(t.id)] = b[size_t(t.view_src->id)];

  // Rule 6.
  for (const Tensor& t : ts) {
    if (is_leaf(&t) || t.op == Op::View) continue;
    int& mine = b[size_t(t.id)];
    if (mine >= 0 && rules.supports(mine, t)) continue;
    if (!rules.supports(rules.host_backend, t))
      throw Error("scheduler: no backend runs node '" + t.name + "' (" + op_name(t.op) + ")");
    mine = rules.host_backend;
    a.streamed[size_t(t.id)] = false;
  }
  return a;
}

}  // namespace weir::sched
