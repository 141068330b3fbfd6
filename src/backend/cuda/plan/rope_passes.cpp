// The launch planner's rope passes: ropes and KV-cache writes as one
// launch, and the norms, scales and bias adds their jobs take over.
#include <algorithm>
#include <string>
#include <vector>

#include "backend/cuda/plan/plan_state.h"

namespace weir::cuda::planner {
namespace {

// Calls f(r, j, end, index_of) for every member r of a rope_store launch
// not skipped (the launch: nodes [j, end)); index_of: a tensor's place in
// p.nodes by its id (-1: not a node).
template <class F>
void each_rope_job(PlanState& p, size_t n_tensors, F&& f) {
  const size_t n = p.nodes.size();
  std::vector<int> index_of(n_tensors, -1);
  for (size_t i = 0; i < n; ++i) index_of[size_t(p.nodes[i]->id)] = int(i);
  for (size_t j = 0; j < n; ++j) {
    if (p.at[j].rope_store_len <= 0) continue;
    const size_t end = j + size_t(p.at[j].rope_store_len);
    for (size_t r = j; r < end; ++r)
      if (!p.at[r].in_other_launch) f(r, j, end, index_of);
    j = end - 1;
  }
}

}  // namespace

// A rope of a rope_store launch whose input is an rms_norm + mul launch
// that only it reads: the rope's job normalizes the rows itself, and the
// norm's launch is skipped (its input kept until the rope's launch ends).
void plan_rope_norm(PlanState& p, const Readers& readers, const CudaOptions& o) {
  if (!o.rope_fusions) return;
  each_rope_job(p, readers.size(), [&](size_t r, size_t, size_t end, const std::vector<int>& index_of) {
    const Tensor& rope = *p.nodes[r];
    if (rope.op != Op::Rope || !rope.src[0] || rope.src[0]->op != Op::Mul) return;
    const int im = index_of[size_t(rope.src[0]->id)];
    if (im < 1 || p.at[size_t(im - 1)].norm_fused != 1 || p.at[size_t(im - 1)].in_other_launch ||
        readers[size_t(rope.src[0]->id)] != 1 ||
        !can_rope_norm(rope, *p.nodes[size_t(im - 1)], *rope.src[0]))
      return;
    p.at[r].rope_norm_node = im - 1;
    p.at[size_t(im - 1)].in_other_launch = p.at[size_t(im)].in_other_launch = true;
    p.at[size_t(im - 1)].memory_end = end;
  });
}

// A rope or set_rows of a rope_store launch whose input is an add of a
// bias row (qwen2's q, k and v biases) that only it reads: the job adds
// the bias itself and the add's launch is skipped (its operands kept until
// the rope's launch ends).
void plan_rope_bias(PlanState& p, const Readers& readers, const CudaOptions& o) {
  if (!o.rope_fusions) return;
  each_rope_job(p, readers.size(), [&](size_t r, size_t j, size_t end, const std::vector<int>& index_of) {
    const Tensor& t = *p.nodes[r];
    const Tensor* x = t.op == Op::Rope ? t.src[0] : t.op == Op::SetRows ? t.src[1] : nullptr;
    if (p.at[r].rope_norm_node >= 0 || !x) return;
    const Tensor* add = x->storage();
    const int ia = add->id >= 0 ? index_of[size_t(add->id)] : -1;
    if (ia < 0 || size_t(ia) >= j || p.at[size_t(ia)].in_other_launch || p.at[size_t(ia)].norm_fused ||
        readers[size_t(add->id)] != 1 ||
        (x != add && readers[size_t(x->id)] != 1) || !can_rope_bias(*x, *add))
      return;
    p.at[r].rope_bias_node = ia;
    p.at[size_t(ia)].in_other_launch = true;
    p.at[size_t(ia)].memory_end = end;
  });
}

// The KV-cache writes of an attention block: a rope whose only reader is a
// set_rows (through a reshape) writes into the cache itself, moved to the
// rope's place when nothing in between touches the cache; then consecutive
// ropes and set_rows that do not read each other's results run as one
// launch.
void plan_rope_store(PlanState& p, const Readers& readers, const CudaOptions& o) {
  const size_t n = p.nodes.size();
  const auto reads = [](const Tensor& t, const Tensor* storage) {
    for (const Tensor* s : t.src)
      if (s && s->storage() == storage) return true;
    return false;
  };
  for (size_t r = 0; r < n; ++r) {
    const Tensor& rope = *p.nodes[r];
    if (rope.op != Op::Rope || readers[size_t(rope.id)] != 1 || !can_rope_store(rope)) continue;
    for (size_t j = r + 1; j < n; ++j) {
      const Tensor& t = *p.nodes[j];
      if (t.op == Op::SetRows && t.src[1] && t.src[1]->storage() == &rope) {
        if (can_rope_into(rope, t) && (t.src[1] == &rope || readers[size_t(t.src[1]->id)] == 1)) {
          const Tensor* table = t.src[0]->storage();
          bool clear = true;
          for (size_t m = r + 1; m < j && clear; ++m)
            clear = !reads(*p.nodes[m], table) &&
                    !(p.nodes[m]->op == Op::SetRows && p.nodes[m]->src[0]->storage() == table);
          if (clear) {
            p.at[r].rope_writes_cache_of = int(j);
            p.at[j].in_other_launch = true;
          }
        }
        break;
      }
      if (reads(t, &rope)) break;
    }
  }
  // A rope whose only reader is a scale (gemma3's q): its job writes the
  // scaled rows as the scale's result, and the scale is skipped.
  for (size_t r = 0; o.rope_fusions && r < n; ++r) {
    const Tensor& rope = *p.nodes[r];
    if (rope.op != Op::Rope || p.at[r].rope_writes_cache_of >= 0 || readers[size_t(rope.id)] != 1 ||
        !can_rope_store(rope)) continue;
    for (size_t j = r + 1; j < n; ++j)
      if (reads(*p.nodes[j], &rope)) {
        if (can_rope_scale(rope, *p.nodes[j])) {
          p.at[r].rope_scale_node = int(j);
          p.at[j].in_other_launch = true;
        }
        break;
      }
  }
  // What a launch member writes: a rope its result (or, written into a
  // cache, the cache too; with a scale, the scale's result), a set_rows its
  // table.
  const auto writes = [&](size_t i) {
    const Tensor& t = *p.nodes[i];
    if (p.at[i].rope_scale_node >= 0) return static_cast<const Tensor*>(p.nodes[size_t(p.at[i].rope_scale_node)]);
    return t.op == Op::SetRows ? t.src[0]->storage() : static_cast<const Tensor*>(&t);
  };
  for (size_t i = 0; i < n; ++i) {
    if (p.at[i].in_other_launch || !can_rope_store(*p.nodes[i]) || p.at[i].norm_fused ||
        p.at[i].products > 1) continue;
    std::vector<const Tensor*> written = {writes(i)};
    if (p.at[i].rope_writes_cache_of >= 0) written.push_back(writes(size_t(p.at[i].rope_writes_cache_of)));
    int jobs = 1;
    size_t j = i + 1;
    for (; j < n && jobs < rope_store_max_jobs(); ++j) {
      if (p.at[j].in_other_launch) continue;
      const Tensor& t = *p.nodes[j];
      if (!can_rope_store(t)) break;
      bool independent = true;
      for (const Tensor* w : written) independent = independent && !reads(t, w) && writes(j) != w;
      if (!independent) break;
      written.push_back(writes(j));
      if (p.at[j].rope_writes_cache_of >= 0) written.push_back(writes(size_t(p.at[j].rope_writes_cache_of)));
      ++jobs;
    }
    if (jobs > 1 || p.at[i].rope_writes_cache_of >= 0 || p.at[i].rope_scale_node >= 0) {
      p.at[i].rope_store_len = int(j - i);
      // A scale's result is written by this launch: planned as one with it
      // for memory up to the scale.
      for (size_t k = i; k < j; ++k)
        if (p.at[k].rope_scale_node >= 0) p.at[i].memory_end = std::max(p.at[i].memory_end,
            size_t(p.at[k].rope_scale_node) + 1);
      i = j - 1;
    }
  }
}

}  // namespace weir::cuda::planner
