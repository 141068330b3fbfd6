#include "backend/cuda/plan/launch_plan.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace weir::cuda {
namespace {

size_t scratch_for(const Tensor& t, const CudaOptions& o) {
  switch (t.op) {
    case Op::MulMat: return mul_mat_scratch_bytes(t, o);
    case Op::Attention: return attention_scratch_bytes(t, o);
    case Op::Sample: return sample_scratch_bytes(t);
    case Op::MulMatId: return expert_scratch_bytes(t);
    default: return 0;
  }
}

enum class Moe : unsigned char { None, Route, ExpertGlu, DownSum };

// The planner's working state of one node, the passes below fill it; a
// launch starts at a node that no earlier launch's span covers. Read into
// Launch values at the end (to_launches).
struct NodePlan {
  size_t scratch = 0;  // its launcher's temporary memory
  // Nodes run with this one as a norm launch: 1 (rms_norm here, mul next)
  // or 2 (add, rms_norm, mul); 0 for the rest.
  int norm_fused = 0;
  int products = 1;                 // products launched together from here (1: alone)
  bool x_q8_in_scratch = false;     // a product: reuses the 8-bit x already in scratch
  bool quantize_out = false;        // the launch here writes its result as 8-bit x for the next
  bool weights_constant = false;    // products: no kernel writes their weights; attention: its mask
  // Ropes and set_rows launched together from here: the nodes
  // [i, i + rope_store_len) (0: not such a launch). A rope whose only reader
  // is a set_rows writes into its cache (rope_writes_cache_of: that set_rows),
  // and the set_rows runs in no launch of its own.
  int rope_store_len = 0;
  int rope_writes_cache_of = -1;
  bool in_other_launch = false;     // computed by another launch (a rope's job)
  int rope_norm_node = -1;   // a rope's rms_norm (+ mul) run by its job (qwen3's q and k norms)
  int rope_scale_node = -1;  // a rope's only reader, a scale, run by its job (gemma3's q)
  int rope_bias_node = -1;   // the add of a bias row a rope or set_rows reads, run by its job (qwen2)
  // rms_norm + mul here, then add + rms_norm + mul at i + 2 whose add reads
  // the first mul alone: one launch (op_norm_add_norm).
  bool norm_add_norm = false;
  // A product here runs the add, rms_norm and mul after it, the norm
  // deferred to the product launches that read mul's result: those have
  // deferred_norm_writer = i.
  bool add_norm = false;
  int deferred_norm_writer = -1;
  // Products here whose results go to the rope/store launch after them, run
  // by the products' own launch (OpCtx::row_jobs): the jobs, one a product.
  // The product launch nearest to the rope/store launch spans it
  // (row_jobs_end); every launch that takes some of its jobs is planned as
  // one with it for memory (memory_end).
  std::vector<RopeStoreNode> row_jobs;
  size_t row_jobs_end = 0;
  size_t memory_end = 0;
  // gate/up products here (2 of them) that apply the GLU at i + 2 in their
  // launch; with 8-bit kernels they write it as 8-bit blocks for the product
  // launch after (x_from_glu there).
  bool glu_in_products = false;
  bool x_from_glu = false;
  Moe moe = Moe::None;
};

struct Work {
  std::vector<Tensor*> nodes;
  std::vector<NodePlan> at;  // by position in nodes
  // The nodes planned as one for memory from a launch at i: [i, unit_end(i)).
  size_t unit_end(size_t i) const { return std::max(i + span(i), at[i].memory_end); }
  // The nodes a launch at i runs (or, where at[i].in_other_launch, the
  // nodes another launch runs for it).
  size_t span(size_t i) const {
    const NodePlan& a = at[i];
    if (a.row_jobs_end) return a.row_jobs_end - i;
    if (a.moe != Moe::None) return a.moe == Moe::ExpertGlu ? 3 : 2;
    if (a.norm_add_norm) return 5;
    return size_t(a.add_norm                ? 4
                  : a.rope_store_len > 0    ? a.rope_store_len
                  : a.glu_in_products       ? 3
                  : a.products > 1          ? a.products
                                            : 1 + a.norm_fused);
  }
};

void plan_rope_store(Work& p, const std::vector<int>& readers, const CudaOptions& o);
void plan_rope_norm(Work& p, const std::vector<int>& readers, const CudaOptions& o);
void plan_rope_bias(Work& p, const std::vector<int>& readers, const CudaOptions& o);
void plan_deferred_norms(Work& p, const std::vector<int>& readers, const CudaOptions& o);
void plan_row_jobs(Work& p, const std::vector<int>& readers, const CudaOptions& o);
void plan_glu(Work& p, const std::vector<int>& readers, const CudaOptions& o);
void plan_moe(Work& p, const std::vector<int>& readers, const CudaOptions& o);
void plan_norm_chains(Work& p, const std::vector<int>& readers, const CudaOptions& o);

// Kernels that can run as one: an rms_norm whose only reader is the mul
// right after it (by a row of weights), together with the add right before
// it when the norm reads that add (the residual stream's pattern); products
// on the same x, one after
// the other with no other user of scratch between them, quantize x once.
void plan_fusion(Work& p, const Graph& g, const CudaOptions& o) {
  const size_t n = p.nodes.size();
  std::vector<int> readers(g.tensors().size(), 0);  // views count as readers
  for (const Tensor& t : g.tensors())
    for (const Tensor* s : t.src)
      if (s) ++readers[size_t(s->id)];
  for (const Tensor* o : g.outputs()) ++readers[size_t(o->id)];
  const auto only_reader_is_next = [&](size_t i) { return readers[size_t(p.nodes[i]->id)] == 1; };
  for (size_t i = 0; i + 1 < n; ++i) {
    if (i + 2 < n && only_reader_is_next(i + 1) &&
        can_fuse_add_rms_norm_mul(*p.nodes[i], *p.nodes[i + 1], *p.nodes[i + 2])) {
      p.at[i].norm_fused = 2;
      i += 2;
    } else if (only_reader_is_next(i) && can_fuse_rms_norm_mul(*p.nodes[i], *p.nodes[i + 1])) {
      p.at[i].norm_fused = 1;
      i += 1;
    }
  }
  // Consecutive products on the same x, one launch (q, k, v; gate, up).
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && int(j - i) < mul_mat_max_group() && p.nodes[i]->op == Op::MulMat &&
           p.nodes[j]->op == Op::MulMat &&
           can_group_mul_mat(*p.nodes[i], *p.nodes[j], o))
      ++j;
    p.at[i].products = int(j - i);
    i = j;
  }
  plan_rope_store(p, readers, o);
  plan_rope_norm(p, readers, o);
  plan_rope_bias(p, readers, o);
  // Products whose weights no kernel of the graph writes: leaves that no
  // set_rows targets (the KV cache is a leaf too).
  std::vector<bool> written(g.tensors().size(), false);
  for (const Tensor* t : p.nodes)
    if (t->op == Op::SetRows) written[size_t(t->src[0]->storage()->id)] = true;
  for (size_t i = 0; i < n; ++i) {
    if (p.nodes[i]->op == Op::Attention) {  // its mask (a graph input)
      const Tensor* m = p.nodes[i]->src[3] ? p.nodes[i]->src[3]->storage() : nullptr;
      p.at[i].weights_constant = m && m->op == Op::Leaf && m->id >= 0 && !written[size_t(m->id)];
      continue;
    }
    bool fixed = p.nodes[i]->op == Op::MulMat;
    for (size_t k = i; fixed && k < i + size_t(p.at[i].products); ++k) {
      const Tensor* w = p.nodes[k]->src[0]->storage();
      fixed = w->op == Op::Leaf && w->id >= 0 && !written[size_t(w->id)];
    }
    p.at[i].weights_constant = fixed;
  }
  // A norm or GLU whose result the next launch, a product, quantizes: the
  // norm or GLU writes the 8-bit blocks itself.
  for (size_t i = 0; i < n;) {
    while (i < n && p.at[i].in_other_launch) ++i;
    if (i >= n) break;
    size_t next = i + p.span(i);
    while (next < n && p.at[next].in_other_launch) ++next;
    const Tensor& out = *p.nodes[i + size_t(p.at[i].norm_fused)];
    const bool producer = p.at[i].norm_fused > 0 || out.op == Op::SiluMul || out.op == Op::GeluMul ||
                          out.op == Op::RmsNorm || out.op == Op::Attention;
    if (producer && next < n && p.nodes[next]->op == Op::MulMat && can_quantize_for(out, *p.nodes[next]))
      p.at[i].quantize_out = true;
    i = next;
  }
  const Tensor* last_x = nullptr;  // x whose 8-bit blocks scratch holds
  for (size_t i = 0; i < n; ++i) {
    const Tensor& t = *p.nodes[i];
    if (p.at[i].quantize_out) {
      last_x = p.nodes[i + size_t(p.at[i].norm_fused)];
      i += size_t(p.at[i].norm_fused);
    } else if (t.op == Op::MulMat && mul_mat_quantizes_x(t)) {
      p.at[i].x_q8_in_scratch = last_x == t.src[1];
      last_x = t.src[1];
    } else if (p.at[i].scratch > 0) {
      last_x = nullptr;  // scratch overwritten
    }
  }
  plan_deferred_norms(p, readers, o);
  plan_row_jobs(p, readers, o);
  plan_glu(p, readers, o);
  plan_moe(p, readers, o);
  plan_norm_chains(p, readers, o);
}

// A norm launch (rms_norm + mul) whose result only the next launch's add
// reads, an add + rms_norm + mul: one launch; the second's 8-bit copy, if
// any, goes with it.
void plan_norm_chains(Work& p, const std::vector<int>& readers, const CudaOptions& o) {
  const size_t n = p.nodes.size();
  for (size_t i = 0; o.norm_chain && i + 4 < n; ++i) {
    if (p.at[i].norm_fused != 1 || p.at[i + 2].norm_fused != 2 || p.at[i].in_other_launch ||
        p.at[i + 2].in_other_launch || p.at[i].quantize_out ||
        p.at[i].memory_end || p.at[i + 2].memory_end || readers[size_t(p.nodes[i + 1]->id)] != 1 ||
        !can_fuse_norm_add_norm(*p.nodes[i], *p.nodes[i + 1], *p.nodes[i + 2], *p.nodes[i + 3], *p.nodes[i + 4]))
      continue;
    p.at[i].norm_add_norm = true;
    p.at[i].quantize_out = p.at[i + 2].quantize_out;
    p.at[i + 2].quantize_out = false;
    i += 4;
  }
}

// The experts' launches: routing (top_k, then moe_weights of its picks);
// gate/up with the GLU where only the down product reads it, on 8-bit x;
// down with moe_sum where only the sum reads it. Nodes of other launches
// are left alone.
void plan_moe(Work& p, const std::vector<int>& readers, const CudaOptions& o) {
  const size_t n = p.nodes.size();
  const auto free_at = [&](size_t i, size_t len) {
    for (size_t k = i; k < i + len; ++k)
      if (k >= n || p.at[k].in_other_launch || p.at[k].norm_fused || p.at[k].products != 1 ||
          p.at[k].glu_in_products || p.at[k].add_norm || p.at[k].deferred_norm_writer >= 0 ||
          !p.at[k].row_jobs.empty() || p.at[k].rope_store_len || p.at[k].moe != Moe::None)
        return false;
    return true;
  };
  for (size_t i = 0; o.moe_fusions && i < n; ++i) {
    const Tensor& t = *p.nodes[i];
    if (t.op == Op::TopK && free_at(i, 2) && can_fuse_route(t, *p.nodes[i + 1])) {
      p.at[i].moe = Moe::Route;
      ++i;
    } else if (t.op == Op::MulMatId && free_at(i, 3) && !expert_mma(t, o) &&
               can_fuse_expert_glu(t, *p.nodes[i + 1], *p.nodes[i + 2]) &&
               readers[size_t(t.id)] == 1 && readers[size_t(p.nodes[i + 1]->id)] == 1 &&
               readers[size_t(p.nodes[i + 2]->id)] == 1 && i + 3 < n && !p.at[i + 3].x_from_glu &&
               p.nodes[i + 3]->op == Op::MulMatId && p.nodes[i + 3]->src[1] == p.nodes[i + 2] &&
               has_expert_q8(*p.nodes[i + 3]) && free_at(i + 3, 1)) {
      p.at[i].moe = Moe::ExpertGlu;
      p.at[i + 3].x_from_glu = true;
      i += 2;
    }
  }
  for (size_t i = 0; o.moe_fusions && i + 1 < n; ++i)
    if (p.nodes[i]->op == Op::MulMatId && free_at(i, 2) && readers[size_t(p.nodes[i]->id)] == 1 &&
        can_fuse_expert_down_sum(*p.nodes[i], *p.nodes[i + 1]))
      p.at[i].moe = Moe::DownSum;
  // The gate/up launch's x as 8-bit blocks from the norm launch that makes
  // it (the FFN's add + rms_norm + mul), where the launches between (the
  // router's float product, the routing) leave scratch alone.
  std::vector<size_t> starts;
  for (size_t i = 0; i < n; i += p.span(i))
    if (!p.at[i].in_other_launch) starts.push_back(i);
  for (size_t s = 0; o.moe_fusions && s < starts.size(); ++s) {
    const size_t i = starts[s];
    if (p.at[i].moe != Moe::ExpertGlu) continue;
    const Tensor* x = p.nodes[i]->src[1];
    if (!x->is_contiguous() || x->view_offset != 0 || x->ne[0] % 32) continue;
    for (size_t b = s; b-- > 0;) {
      const size_t j = starts[b];
      const Tensor& out = *p.nodes[j + size_t(p.at[j].norm_fused)];
      if (&out == x->storage()) {
        if ((p.at[j].norm_fused > 0 || out.op == Op::RmsNorm) && !p.at[j].quantize_out && out.dtype == DType::F32 &&
            out.ne[0] == x->ne[0] && out.is_contiguous()) {
          p.at[j].quantize_out = true;
          p.at[i].x_q8_in_scratch = true;
        }
        break;
      }
      bool scratch = false;
      for (size_t k = j; k < j + p.span(j); ++k) scratch = scratch || p.at[k].scratch > 0;
      if (scratch || p.at[j].moe == Moe::ExpertGlu || p.at[j].glu_in_products || p.at[j].add_norm) break;
    }
  }
}

// gate/up products read only by a GLU that the next product launch alone
// reads, as 8-bit blocks: the GLU runs in the products' launch. With the
// float decode kernel (F16, ...), gate/up read only by a GLU: the launch
// writes the GLU's result.
void plan_glu(Work& p, const std::vector<int>& readers, const CudaOptions& o) {
  const bool on = o.glu_in_products;  // off: a GLU kernel instead (for comparisons)
  const size_t n = p.nodes.size();
  for (size_t i = 0; on && i + 3 < n; ++i) {
    if (p.at[i].in_other_launch || p.at[i].products != 2 || p.at[i].add_norm || !p.at[i].row_jobs.empty() ||
        p.at[i].x_from_glu) continue;
    const Tensor& a = *p.nodes[i];
    const Tensor& b = *p.nodes[i + 1];
    const Tensor& glu = *p.nodes[i + 2];
    if (readers[size_t(a.id)] != 1 || readers[size_t(b.id)] != 1 || p.at[i + 2].norm_fused) continue;
    if (!p.at[i + 2].quantize_out && can_fuse_vec_glu(a, b, glu)) {
      p.at[i].glu_in_products = true;
      i += 2;
      continue;
    }
    if (readers[size_t(glu.id)] != 1 || !p.at[i + 2].quantize_out || !can_fuse_glu(a, b, glu)) continue;
    size_t next = i + 3;
    while (next < n && p.at[next].in_other_launch) ++next;
    if (next >= n || p.nodes[next]->op != Op::MulMat || p.nodes[next]->src[1] != &glu ||
        !p.at[next].x_q8_in_scratch ||
        p.at[next].products != 1 || p.at[next].deferred_norm_writer >= 0)
      continue;
    p.at[i].glu_in_products = true;
    p.at[next].x_from_glu = true;
    i += 2;
  }
}

// A product whose only reader is an add + rms_norm + mul launch (the
// residual stream) whose mul's result only the next launches' products
// read: the three run in the product's launch, the norm's division by the
// rms deferred to those products (mul_mat_q8.h). Not where the product
// itself reads a deferred norm.
void plan_deferred_norms(Work& p, const std::vector<int>& readers, const CudaOptions& o) {
  const bool on = o.defer_norm;  // off: a norm kernel instead (for comparisons)
  const size_t n = p.nodes.size();
  for (size_t i = 0; on && i + 4 < n; ++i) {
    if (p.at[i].in_other_launch || p.at[i].products != 1 || p.at[i].deferred_norm_writer >= 0 ||
        p.at[i + 1].norm_fused != 2) continue;
    const Tensor& prod = *p.nodes[i];
    const Tensor& mul = *p.nodes[i + 3];
    // The 8-bit kernels' deferred norm replaces the norm's 8-bit blocks;
    // the float kernel's writes mul's result.
    const bool q8 = mul_mat_quantizes_x(prod);
    if ((q8 && !p.at[i + 1].quantize_out) || readers[size_t(prod.id)] != 1 ||
        !can_defer_norm(prod, *p.nodes[i + 1], *p.nodes[i + 2], mul))
      continue;
    // The product launches after it that read mul's result (q/k, then v
    // where v has a type of its own), together every reader of it.
    std::vector<size_t> takers;
    int taken = 0;
    for (size_t next = i + 4; next < n && taken < readers[size_t(mul.id)];) {
      while (next < n && p.at[next].in_other_launch) ++next;
      if (next >= n || p.nodes[next]->op != Op::MulMat || p.nodes[next]->src[1] != &mul ||
          (q8 && !p.at[next].x_q8_in_scratch))
        break;
      bool takes = true;
      for (size_t k = next; k < next + size_t(p.at[next].products); ++k) takes = takes &&
           mul_mat_takes_deferred_norm(prod, *p.nodes[k]);
      if (!takes) break;
      takers.push_back(next);
      taken += p.at[next].products;
      next += size_t(p.at[next].products);
    }
    if (takers.empty() || taken != readers[size_t(mul.id)]) continue;
    p.at[i].add_norm = true;
    for (size_t t : takers) p.at[t].deferred_norm_writer = int(i);
    i += 3;
  }
}

// A rope_store launch whose jobs read the results of the product launches
// right before it, and nothing else reads those (q, k, v -> rope q, rope k
// into the cache, v into its cache; in Q4_K_M files v often has a type of
// its own, a launch of its own): the product launches run the jobs on their
// results, and no rope_store launch runs.
void plan_row_jobs(Work& p, const std::vector<int>& readers, const CudaOptions& o) {
  const bool on = o.rope_in_products;  // off: a rope_store launch instead (for comparisons)
  const size_t n = p.nodes.size();
  std::vector<size_t> starts;  // the launches, in order
  for (size_t i = 0; i < n; i += p.span(i))
    if (!p.at[i].in_other_launch) starts.push_back(i);
  for (size_t s = 0; on && s < starts.size(); ++s) {
    const size_t j = starts[s];
    if (p.at[j].rope_store_len <= 0) continue;
    std::vector<RopeStoreNode> jobs;
    std::vector<const Tensor*> reads;  // the product each job reads
    bool ok = true;
    for (size_t k = j; ok && k < j + size_t(p.at[j].rope_store_len); ++k) {
      if (p.at[k].in_other_launch) continue;
      const Tensor& t = *p.nodes[k];
      const Tensor* src = t.op == Op::Rope ? t.src[0] : t.src[1];
      ok = src && readers[size_t(src->storage()->id)] == 1 && (src == src->storage() ||
          readers[size_t(src->id)] == 1);
      jobs.push_back({&t,
          p.at[k].rope_writes_cache_of >= 0 ? p.nodes[size_t(p.at[k].rope_writes_cache_of)] : nullptr});
      reads.push_back(ok ? src->storage() : nullptr);
    }
    // The product launches before it, nearest first, until every job has one.
    std::vector<size_t> takers;
    std::vector<std::vector<RopeStoreNode>> taken;
    size_t assigned = 0;
    for (size_t b = s; ok && assigned < jobs.size() && b-- > 0;) {
      const size_t i = starts[b];
      if (p.nodes[i]->op != Op::MulMat || p.at[i].add_norm || !p.at[i].row_jobs.empty()) {
        ok = false;
        break;
      }
      std::vector<RopeStoreNode> mine;
      for (size_t m = 0; ok && m < size_t(p.at[i].products); ++m) {
        size_t q = 0;
        while (q < jobs.size() && reads[q] != p.nodes[i + m]) ++q;
        ok = q < jobs.size();
        if (ok) mine.push_back(jobs[q]), ++assigned;
      }
      ok = ok && can_run_row_jobs(&p.nodes[i], p.at[i].products, mine.data());
      takers.push_back(i);
      taken.push_back(std::move(mine));
    }
    if (!ok || assigned != jobs.size()) continue;
    const size_t end = j + size_t(p.at[j].rope_store_len);
    for (size_t k = 0; k < takers.size(); ++k) {
      p.at[takers[k]].row_jobs = std::move(taken[k]);
      p.at[takers[k]].memory_end = end;
    }
    p.at[takers[0]].row_jobs_end = end;
  }
}

// Calls f(r, j, end, index_of) for every member r of a rope_store launch
// not skipped (the launch: nodes [j, end)); index_of: a tensor's place in
// p.nodes by its id (-1: not a node).
template <class F>
void each_rope_job(Work& p, size_t n_tensors, F&& f) {
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

// A rope of a rope_store launch whose input is an rms_norm + mul launch
// that only it reads: the rope's job normalizes the rows itself, and the
// norm's launch is skipped (its input kept until the rope's launch ends).
void plan_rope_norm(Work& p, const std::vector<int>& readers, const CudaOptions& o) {
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
void plan_rope_bias(Work& p, const std::vector<int>& readers, const CudaOptions& o) {
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
void plan_rope_store(Work& p, const std::vector<int>& readers, const CudaOptions& o) {
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



// The rope/store launch at i's jobs (its nodes not computed elsewhere).
std::vector<RopeStoreNode> rope_store_jobs(const Work& p, size_t i) {
  const auto node = [&](int k) { return k >= 0 ? p.nodes[size_t(k)] : nullptr; };
  std::vector<RopeStoreNode> jobs;
  for (size_t k = i; k < i + size_t(p.at[i].rope_store_len); ++k) {
    const NodePlan& a = p.at[k];
    if (!a.in_other_launch)
      jobs.push_back({p.nodes[k], node(a.rope_writes_cache_of), node(a.rope_norm_node), node(a.rope_scale_node),
                      node(a.rope_bias_node)});
  }
  return jobs;
}

LaunchKind kind_of(const Work& p, size_t i) {
  const NodePlan& a = p.at[i];
  if (a.in_other_launch) return LaunchKind::InOtherLaunch;
  if (a.rope_store_len > 0) return LaunchKind::RopeStore;
  switch (a.moe) {
    case Moe::Route: return LaunchKind::Route;
    case Moe::ExpertGlu: return LaunchKind::ExpertsGlu;
    case Moe::DownSum: return LaunchKind::ExpertsDownSum;
    case Moe::None: break;
  }
  if (a.norm_add_norm) return LaunchKind::NormAddNorm;
  if (a.glu_in_products) return LaunchKind::ProductsGlu;
  if (a.add_norm) return LaunchKind::ProductAddNorm;
  if (a.norm_fused == 1) return LaunchKind::NormMul;
  if (a.norm_fused == 2) return LaunchKind::AddNormMul;
  if (a.products > 1 || !a.row_jobs.empty()) return LaunchKind::Products;
  return LaunchKind::Single;
}

// The working state read into launches, and the shared memory they need.
LaunchPlan to_launches(Work& w) {
  LaunchPlan p;
  const size_t n = w.nodes.size();
  for (size_t i = 0; i < n; i += w.span(i)) {
    const NodePlan& a = w.at[i];
    Launch l;
    l.kind = kind_of(w, i);
    l.first = i;
    l.end = std::min(n, i + w.span(i));
    l.memory_end = std::min(n, w.unit_end(i));
    l.products = l.kind == LaunchKind::Products ? a.products : 0;
    if (a.deferred_norm_writer >= 0) {
      l.x_from = ActivationSource::DeferredNorm;
      l.deferred_norm_writer = size_t(a.deferred_norm_writer);
    } else if (a.x_from_glu) {
      l.x_from = ActivationSource::GluQ8;
    } else if (a.x_q8_in_scratch) {
      l.x_from = ActivationSource::Q8InScratch;
    }
    l.quantize_out = a.quantize_out;
    l.weights_constant = a.weights_constant;
    l.jobs = l.kind == LaunchKind::RopeStore ? rope_store_jobs(w, i) : a.row_jobs;
    const Tensor& t = *w.nodes[i];
    if (l.kind == LaunchKind::ProductAddNorm) p.deferred_norm_bytes = std::max(p.deferred_norm_bytes,
        deferred_norm_bytes(t));
    if (l.kind == LaunchKind::ProductsGlu && mul_mat_quantizes_x(t))
      p.glu_q8_bytes = std::max(p.glu_q8_bytes, glu_q8_bytes(*w.nodes[i + 2]));
    if (l.kind == LaunchKind::ExpertsGlu) p.glu_q8_bytes = std::max(p.glu_q8_bytes,
        expert_glu_q8_bytes(*w.nodes[i + 2]));
    p.launches.push_back(std::move(l));
  }
  for (const NodePlan& a : w.at) p.scratch_bytes = std::max(p.scratch_bytes, a.scratch);
  p.nodes = std::move(w.nodes);
  return p;
}

}  // namespace

LaunchPlan plan_launches(const Graph& g, const CudaOptions& o) {
  Work w;
  for (const Tensor& t : g.tensors()) {
    if (t.op == Op::Leaf || t.op == Op::View) continue;
    w.nodes.push_back(const_cast<Tensor*>(&t));
    w.at.emplace_back().scratch = scratch_for(t, o);
  }
  plan_fusion(w, g, o);
  return to_launches(w);
}

size_t LaunchPlan::kernel_launches() const {
  size_t n = 0;
  for (const Launch& l : launches) n += l.kind != LaunchKind::InOtherLaunch;
  return n;
}

std::string profile_key(const Tensor& t) {
  const auto n = [](int64_t v) { return std::to_string(v); };
  std::string k = op_name(t.op);
  if (t.op == Op::MulMat || t.op == Op::MulMatId) {
    const Tensor& w = *t.src[0];
    k.append(" ").append(dtype_name(w.dtype)).append(" ").append(n(w.ne[1])).append("x").append(n(w.ne[0]));
    k.append(" T").append(n(t.n_rows()));
  } else if (t.op == Op::Attention) {
    k.append(" D").append(n(t.src[0]->ne[0])).append(" Hq").append(n(t.src[0]->ne[1]));
    k.append(" T").append(n(t.src[0]->ne[2])).append(" S").append(n(t.src[1]->ne[2]));
  } else {
    k.append(" T").append(n(t.n_rows()));
  }
  return k;
}

std::string LaunchPlan::label(const Launch& l) const {
  const Tensor& t = *nodes[l.first];
  const std::string rows = " T" + std::to_string(t.n_rows());
  std::string key;
  switch (l.kind) {
    case LaunchKind::NormAddNorm: key = "rms_norm+mul+add+rms_norm+mul" + rows; break;
    case LaunchKind::ProductAddNorm: key = profile_key(t) + " +add+rms_norm+mul"; break;
    case LaunchKind::NormMul: key = "rms_norm+mul" + rows; break;
    case LaunchKind::AddNormMul: key = "add+rms_norm+mul" + rows; break;
    case LaunchKind::RopeStore: {
      bool norm = false, scale = false, bias = false;
      for (const RopeStoreNode& j : l.jobs) norm |= j.norm != nullptr, scale |= j.scale != nullptr,
           bias |= j.bias != nullptr;
      key = "rope/set_rows x" + std::to_string(l.end - l.first) + rows + (norm ? " +rms_norm+mul" : "") +
            (scale ? " +scale" : "") + (bias ? " +add" : "");
      break;
    }
    case LaunchKind::InOtherLaunch: key = "(in another launch) " + profile_key(t); break;
    default: key = profile_key(t);
  }
  if (l.quantize_out) key += " +q8";
  if (l.kind == LaunchKind::Products && !l.jobs.empty()) key += " +rope/set_rows";
  if (l.kind == LaunchKind::ProductsGlu)
    key += " +" + std::string(op_name(nodes[l.first + 2]->op)) + (mul_mat_quantizes_x(t) ? " +q8" : "");
  if (l.kind == LaunchKind::Route) key = "top_k+moe_weights" + rows;
  if (l.kind == LaunchKind::ExpertsGlu) key = "2 x " + profile_key(t) + " +" + op_name(nodes[l.first + 2]->op) + " +q8";
  if (l.kind == LaunchKind::ExpertsDownSum) key = profile_key(t) + " +moe_sum";
  const int grouped = l.kind == LaunchKind::ProductsGlu ? 2 : l.products;
  if (grouped > 1) key = std::to_string(grouped) + " x " + key;
  return key + (l.x_from == ActivationSource::DeferredNorm ? " (x after a deferred norm)"
                : l.x_from == ActivationSource::GluQ8      ? " (x: the GLU's 8-bit blocks)"
                : l.x_from == ActivationSource::Q8InScratch ? " (x shared)"
                                                            : "");
}

}  // namespace weir::cuda
