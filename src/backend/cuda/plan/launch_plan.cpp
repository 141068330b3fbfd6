#include "backend/cuda/launch_plan.h"

#include <algorithm>
#include <string>

#include "backend/cuda/moe_ops.h"
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

void plan_rope_store(LaunchPlan& p, const std::vector<int>& readers, const CudaOptions& o);
void plan_rope_norm(LaunchPlan& p, const std::vector<int>& readers, const CudaOptions& o);
void plan_rope_bias(LaunchPlan& p, const std::vector<int>& readers, const CudaOptions& o);
void plan_norm_folds(LaunchPlan& p, const std::vector<int>& readers, const CudaOptions& o);
void plan_row_jobs(LaunchPlan& p, const std::vector<int>& readers, const CudaOptions& o);
void plan_glu(LaunchPlan& p, const std::vector<int>& readers, const CudaOptions& o);
void plan_moe(LaunchPlan& p, const std::vector<int>& readers, const CudaOptions& o);
void plan_norm_chains(LaunchPlan& p, const std::vector<int>& readers, const CudaOptions& o);

// Kernels that can run as one: an rms_norm whose only reader is the mul
// right after it (by a row of weights), together with the add right before
// it when the norm reads that add (the residual stream's pattern); products
// on the same x, one after
// the other with no other user of scratch between them, quantize x once.
void plan_fusion(LaunchPlan& p, const Graph& g, const CudaOptions& o) {
  const size_t n = p.nodes.size();
  std::vector<int> readers(g.tensors().size(), 0);  // views count as readers
  for (const Tensor& t : g.tensors())
    for (const Tensor* s : t.src)
      if (s) ++readers[size_t(s->id)];
  for (const Tensor* o : g.outputs()) ++readers[size_t(o->id)];
  p.fused.assign(n, 0);
  p.fold.assign(n, false);
  p.fold_from.assign(n, -1);
  p.row_jobs.assign(n, {});
  p.jobs_end.assign(n, 0);
  p.mem_end.assign(n, 0);
  p.glu.assign(n, false);
  p.x_handed.assign(n, false);
  p.moe.assign(n, LaunchPlan::Moe::None);
  p.norm_chain.assign(n, false);
  const auto only_reader_is_next = [&](size_t i) { return readers[size_t(p.nodes[i]->id)] == 1; };
  for (size_t i = 0; i + 1 < n; ++i) {
    if (i + 2 < n && only_reader_is_next(i + 1) &&
        can_fuse_add_rms_norm_mul(*p.nodes[i], *p.nodes[i + 1], *p.nodes[i + 2])) {
      p.fused[i] = 2;
      i += 2;
    } else if (only_reader_is_next(i) && can_fuse_rms_norm_mul(*p.nodes[i], *p.nodes[i + 1])) {
      p.fused[i] = 1;
      i += 1;
    }
  }
  // Consecutive products on the same x, one launch (q, k, v; gate, up).
  p.group.assign(n, 1);
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && int(j - i) < mul_mat_max_group() && p.nodes[i]->op == Op::MulMat && p.nodes[j]->op == Op::MulMat &&
           can_group_mul_mat(*p.nodes[i], *p.nodes[j], o))
      ++j;
    p.group[i] = int(j - i);
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
  p.w_fixed.assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    if (p.nodes[i]->op == Op::Attention) {  // its mask (a graph input)
      const Tensor* m = p.nodes[i]->src[3] ? p.nodes[i]->src[3]->storage() : nullptr;
      p.w_fixed[i] = m && m->op == Op::Leaf && m->id >= 0 && !written[size_t(m->id)];
      continue;
    }
    bool fixed = p.nodes[i]->op == Op::MulMat;
    for (size_t k = i; fixed && k < i + size_t(p.group[i]); ++k) {
      const Tensor* w = p.nodes[k]->src[0]->storage();
      fixed = w->op == Op::Leaf && w->id >= 0 && !written[size_t(w->id)];
    }
    p.w_fixed[i] = fixed;
  }
  // A norm or GLU whose result the next launch, a product, quantizes: the
  // norm or GLU writes the 8-bit blocks itself.
  p.quantize_out.assign(n, false);
  for (size_t i = 0; i < n;) {
    while (i < n && p.skip[i]) ++i;
    if (i >= n) break;
    size_t next = i + p.span(i);
    while (next < n && p.skip[next]) ++next;
    const Tensor& out = *p.nodes[i + size_t(p.fused[i])];
    const bool producer = p.fused[i] > 0 || out.op == Op::SiluMul || out.op == Op::GeluMul || out.op == Op::RmsNorm ||
                          out.op == Op::Attention;
    if (producer && next < n && p.nodes[next]->op == Op::MulMat && can_quantize_for(out, *p.nodes[next]))
      p.quantize_out[i] = true;
    i = next;
  }
  p.x_quantized.assign(n, false);
  const Tensor* last_x = nullptr;  // x whose 8-bit blocks scratch holds
  for (size_t i = 0; i < n; ++i) {
    const Tensor& t = *p.nodes[i];
    if (p.quantize_out[i]) {
      last_x = p.nodes[i + size_t(p.fused[i])];
      i += size_t(p.fused[i]);
    } else if (t.op == Op::MulMat && mul_mat_quantizes_x(t)) {
      p.x_quantized[i] = last_x == t.src[1];
      last_x = t.src[1];
    } else if (p.scratch[i] > 0) {
      last_x = nullptr;  // scratch overwritten
    }
  }
  plan_norm_folds(p, readers, o);
  plan_row_jobs(p, readers, o);
  plan_glu(p, readers, o);
  plan_moe(p, readers, o);
  plan_norm_chains(p, readers, o);
}

// A norm launch (rms_norm + mul) whose result only the next launch's add
// reads, an add + rms_norm + mul: one launch; the second's 8-bit copy, if
// any, goes with it.
void plan_norm_chains(LaunchPlan& p, const std::vector<int>& readers, const CudaOptions& o) {
  const size_t n = p.nodes.size();
  for (size_t i = 0; o.norm_chain && i + 4 < n; ++i) {
    if (p.fused[i] != 1 || p.fused[i + 2] != 2 || p.skip[i] || p.skip[i + 2] || p.quantize_out[i] ||
        p.mem_end[i] || p.mem_end[i + 2] || readers[size_t(p.nodes[i + 1]->id)] != 1 ||
        !can_fuse_norm_add_norm(*p.nodes[i], *p.nodes[i + 1], *p.nodes[i + 2], *p.nodes[i + 3], *p.nodes[i + 4]))
      continue;
    p.norm_chain[i] = true;
    p.quantize_out[i] = p.quantize_out[i + 2];
    p.quantize_out[i + 2] = false;
    i += 4;
  }
}

// The experts' launches: routing (top_k, then moe_weights of its picks);
// gate/up with the GLU where only the down product reads it, on 8-bit x;
// down with moe_sum where only the sum reads it. Nodes of other launches
// are left alone.
void plan_moe(LaunchPlan& p, const std::vector<int>& readers, const CudaOptions& o) {
  using Moe = LaunchPlan::Moe;
  const size_t n = p.nodes.size();
  const auto free_at = [&](size_t i, size_t len) {
    for (size_t k = i; k < i + len; ++k)
      if (k >= n || p.skip[k] || p.fused[k] || p.group[k] != 1 || p.glu[k] || p.fold[k] || p.fold_from[k] >= 0 ||
          !p.row_jobs[k].empty() || p.rope_store[k] || p.moe[k] != Moe::None)
        return false;
    return true;
  };
  for (size_t i = 0; o.moe_fuse && i < n; ++i) {
    const Tensor& t = *p.nodes[i];
    if (t.op == Op::TopK && free_at(i, 2) && can_fuse_route(t, *p.nodes[i + 1])) {
      p.moe[i] = Moe::Route;
      ++i;
    } else if (t.op == Op::MulMatId && free_at(i, 3) && !expert_mma(t, o) &&
               can_fuse_expert_glu(t, *p.nodes[i + 1], *p.nodes[i + 2]) &&
               readers[size_t(t.id)] == 1 && readers[size_t(p.nodes[i + 1]->id)] == 1 &&
               readers[size_t(p.nodes[i + 2]->id)] == 1 && i + 3 < n && !p.x_handed[i + 3] &&
               p.nodes[i + 3]->op == Op::MulMatId && p.nodes[i + 3]->src[1] == p.nodes[i + 2] &&
               has_expert_q8(*p.nodes[i + 3]) && free_at(i + 3, 1)) {
      p.moe[i] = Moe::ExpertGlu;
      p.x_handed[i + 3] = true;
      i += 2;
    }
  }
  for (size_t i = 0; o.moe_fuse && i + 1 < n; ++i)
    if (p.nodes[i]->op == Op::MulMatId && free_at(i, 2) && readers[size_t(p.nodes[i]->id)] == 1 &&
        can_fuse_expert_down_sum(*p.nodes[i], *p.nodes[i + 1]))
      p.moe[i] = Moe::DownSum;
  // The gate/up launch's x as 8-bit blocks from the norm launch that makes
  // it (the FFN's add + rms_norm + mul), where the launches between (the
  // router's float product, the routing) leave scratch alone.
  std::vector<size_t> starts;
  for (size_t i = 0; i < n; i += p.span(i))
    if (!p.skip[i]) starts.push_back(i);
  for (size_t s = 0; o.moe_fuse && s < starts.size(); ++s) {
    const size_t i = starts[s];
    if (p.moe[i] != Moe::ExpertGlu) continue;
    const Tensor* x = p.nodes[i]->src[1];
    if (!x->is_contiguous() || x->view_offset != 0 || x->ne[0] % 32) continue;
    for (size_t b = s; b-- > 0;) {
      const size_t j = starts[b];
      const Tensor& out = *p.nodes[j + size_t(p.fused[j])];
      if (&out == x->storage()) {
        if ((p.fused[j] > 0 || out.op == Op::RmsNorm) && !p.quantize_out[j] && out.dtype == DType::F32 &&
            out.ne[0] == x->ne[0] && out.is_contiguous()) {
          p.quantize_out[j] = true;
          p.x_quantized[i] = true;
        }
        break;
      }
      bool scratch = false;
      for (size_t k = j; k < j + p.span(j); ++k) scratch = scratch || p.scratch[k] > 0;
      if (scratch || p.moe[j] == Moe::ExpertGlu || p.glu[j] || p.fold[j]) break;
    }
  }
}

// gate/up products read only by a GLU that the next product launch alone
// reads, as 8-bit blocks: the GLU runs in the products' launch. With the
// float decode kernel (F16, ...), gate/up read only by a GLU: the launch
// writes the GLU's result.
void plan_glu(LaunchPlan& p, const std::vector<int>& readers, const CudaOptions& o) {
  const bool on = o.glu_fuse;  // off: a GLU kernel instead (for comparisons)
  const size_t n = p.nodes.size();
  for (size_t i = 0; on && i + 3 < n; ++i) {
    if (p.skip[i] || p.group[i] != 2 || p.fold[i] || !p.row_jobs[i].empty() || p.x_handed[i]) continue;
    const Tensor& a = *p.nodes[i];
    const Tensor& b = *p.nodes[i + 1];
    const Tensor& glu = *p.nodes[i + 2];
    if (readers[size_t(a.id)] != 1 || readers[size_t(b.id)] != 1 || p.fused[i + 2]) continue;
    if (!p.quantize_out[i + 2] && can_fuse_vec_glu(a, b, glu)) {
      p.glu[i] = true;
      i += 2;
      continue;
    }
    if (readers[size_t(glu.id)] != 1 || !p.quantize_out[i + 2] || !can_fuse_glu(a, b, glu)) continue;
    size_t next = i + 3;
    while (next < n && p.skip[next]) ++next;
    if (next >= n || p.nodes[next]->op != Op::MulMat || p.nodes[next]->src[1] != &glu || !p.x_quantized[next] ||
        p.group[next] != 1 || p.fold_from[next] >= 0)
      continue;
    p.glu[i] = true;
    p.x_handed[next] = true;
    i += 2;
  }
}

// A product whose only reader is an add + rms_norm + mul launch (the
// residual stream), which hands mul's result to the next launch's products
// alone: the three run in the product's launch, and the next launch reads
// the fold (mul_mat_q8.h). Not where the product itself reads a fold.
void plan_norm_folds(LaunchPlan& p, const std::vector<int>& readers, const CudaOptions& o) {
  const bool on = o.norm_fold;  // off: a norm kernel instead (for comparisons)
  const size_t n = p.nodes.size();
  for (size_t i = 0; on && i + 4 < n; ++i) {
    if (p.skip[i] || p.group[i] != 1 || p.fold_from[i] >= 0 || p.fused[i + 1] != 2) continue;
    const Tensor& prod = *p.nodes[i];
    const Tensor& mul = *p.nodes[i + 3];
    // The 8-bit kernels' fold replaces the norm's 8-bit blocks; the float
    // kernel's writes mul's result.
    const bool q8 = mul_mat_quantizes_x(prod);
    if ((q8 && !p.quantize_out[i + 1]) || readers[size_t(prod.id)] != 1 ||
        !can_fold_norm(prod, *p.nodes[i + 1], *p.nodes[i + 2], mul))
      continue;
    // The product launches after it that read mul's result (q/k, then v
    // where v has a type of its own), together every reader of it.
    std::vector<size_t> takers;
    int taken = 0;
    for (size_t next = i + 4; next < n && taken < readers[size_t(mul.id)];) {
      while (next < n && p.skip[next]) ++next;
      if (next >= n || p.nodes[next]->op != Op::MulMat || p.nodes[next]->src[1] != &mul ||
          (q8 && !p.x_quantized[next]))
        break;
      bool takes = true;
      for (size_t k = next; k < next + size_t(p.group[next]); ++k) takes = takes && mul_mat_takes_fold(prod, *p.nodes[k]);
      if (!takes) break;
      takers.push_back(next);
      taken += p.group[next];
      next += size_t(p.group[next]);
    }
    if (takers.empty() || taken != readers[size_t(mul.id)]) continue;
    p.fold[i] = true;
    for (size_t t : takers) p.fold_from[t] = int(i);
    i += 3;
  }
}

// A rope_store launch whose jobs read the results of the product launches
// right before it, and nothing else reads those (q, k, v -> rope q, rope k
// into the cache, v into its cache; in Q4_K_M files v often has a type of
// its own, a launch of its own): the product launches run the jobs on their
// results, and no rope_store launch runs.
void plan_row_jobs(LaunchPlan& p, const std::vector<int>& readers, const CudaOptions& o) {
  const bool on = o.row_jobs;  // off: a rope_store launch instead (for comparisons)
  const size_t n = p.nodes.size();
  std::vector<size_t> starts;  // the launches, in order
  for (size_t i = 0; i < n; i += p.span(i))
    if (!p.skip[i]) starts.push_back(i);
  for (size_t s = 0; on && s < starts.size(); ++s) {
    const size_t j = starts[s];
    if (p.rope_store[j] <= 0) continue;
    std::vector<RopeStoreNode> jobs;
    std::vector<const Tensor*> reads;  // the product each job reads
    bool ok = true;
    for (size_t k = j; ok && k < j + size_t(p.rope_store[j]); ++k) {
      if (p.skip[k]) continue;
      const Tensor& t = *p.nodes[k];
      const Tensor* src = t.op == Op::Rope ? t.src[0] : t.src[1];
      ok = src && readers[size_t(src->storage()->id)] == 1 && (src == src->storage() || readers[size_t(src->id)] == 1);
      jobs.push_back({&t, p.rope_into[k] >= 0 ? p.nodes[size_t(p.rope_into[k])] : nullptr});
      reads.push_back(ok ? src->storage() : nullptr);
    }
    // The product launches before it, nearest first, until every job has one.
    std::vector<size_t> takers;
    std::vector<std::vector<RopeStoreNode>> taken;
    size_t assigned = 0;
    for (size_t b = s; ok && assigned < jobs.size() && b-- > 0;) {
      const size_t i = starts[b];
      if (p.nodes[i]->op != Op::MulMat || p.fold[i] || !p.row_jobs[i].empty()) {
        ok = false;
        break;
      }
      std::vector<RopeStoreNode> mine;
      for (size_t m = 0; ok && m < size_t(p.group[i]); ++m) {
        size_t q = 0;
        while (q < jobs.size() && reads[q] != p.nodes[i + m]) ++q;
        ok = q < jobs.size();
        if (ok) mine.push_back(jobs[q]), ++assigned;
      }
      ok = ok && can_run_row_jobs(&p.nodes[i], p.group[i], mine.data());
      takers.push_back(i);
      taken.push_back(std::move(mine));
    }
    if (!ok || assigned != jobs.size()) continue;
    const size_t end = j + size_t(p.rope_store[j]);
    for (size_t k = 0; k < takers.size(); ++k) {
      p.row_jobs[takers[k]] = std::move(taken[k]);
      p.mem_end[takers[k]] = end;
    }
    p.jobs_end[takers[0]] = end;
  }
}

// Calls f(r, j, end, index_of) for every member r of a rope_store launch
// not skipped (the launch: nodes [j, end)); index_of: a tensor's place in
// p.nodes by its id (-1: not a node).
template <class F>
void each_rope_job(LaunchPlan& p, size_t n_tensors, F&& f) {
  const size_t n = p.nodes.size();
  std::vector<int> index_of(n_tensors, -1);
  for (size_t i = 0; i < n; ++i) index_of[size_t(p.nodes[i]->id)] = int(i);
  for (size_t j = 0; j < n; ++j) {
    if (p.rope_store[j] <= 0) continue;
    const size_t end = j + size_t(p.rope_store[j]);
    for (size_t r = j; r < end; ++r)
      if (!p.skip[r]) f(r, j, end, index_of);
    j = end - 1;
  }
}

// A rope of a rope_store launch whose input is an rms_norm + mul launch
// that only it reads: the rope's job normalizes the rows itself, and the
// norm's launch is skipped (its input kept until the rope's launch ends).
void plan_rope_norm(LaunchPlan& p, const std::vector<int>& readers, const CudaOptions& o) {
  p.rope_norm.assign(p.nodes.size(), -1);
  if (!o.rope_norm) return;
  each_rope_job(p, readers.size(), [&](size_t r, size_t, size_t end, const std::vector<int>& index_of) {
    const Tensor& rope = *p.nodes[r];
    if (rope.op != Op::Rope || !rope.src[0] || rope.src[0]->op != Op::Mul) return;
    const int im = index_of[size_t(rope.src[0]->id)];
    if (im < 1 || p.fused[size_t(im - 1)] != 1 || p.skip[size_t(im - 1)] || readers[size_t(rope.src[0]->id)] != 1 ||
        !can_rope_norm(rope, *p.nodes[size_t(im - 1)], *rope.src[0]))
      return;
    p.rope_norm[r] = im - 1;
    p.skip[size_t(im - 1)] = p.skip[size_t(im)] = true;
    p.mem_end[size_t(im - 1)] = end;
  });
}

// A rope or set_rows of a rope_store launch whose input is an add of a
// bias row (qwen2's q, k and v biases) that only it reads: the job adds
// the bias itself and the add's launch is skipped (its operands kept until
// the rope's launch ends).
void plan_rope_bias(LaunchPlan& p, const std::vector<int>& readers, const CudaOptions& o) {
  p.rope_bias.assign(p.nodes.size(), -1);
  if (!o.rope_norm) return;
  each_rope_job(p, readers.size(), [&](size_t r, size_t j, size_t end, const std::vector<int>& index_of) {
    const Tensor& t = *p.nodes[r];
    const Tensor* x = t.op == Op::Rope ? t.src[0] : t.op == Op::SetRows ? t.src[1] : nullptr;
    if (p.rope_norm[r] >= 0 || !x) return;
    const Tensor* add = x->storage();
    const int ia = add->id >= 0 ? index_of[size_t(add->id)] : -1;
    if (ia < 0 || size_t(ia) >= j || p.skip[size_t(ia)] || p.fused[size_t(ia)] || readers[size_t(add->id)] != 1 ||
        (x != add && readers[size_t(x->id)] != 1) || !can_rope_bias(*x, *add))
      return;
    p.rope_bias[r] = ia;
    p.skip[size_t(ia)] = true;
    p.mem_end[size_t(ia)] = end;
  });
}

// The KV-cache writes of an attention block: a rope whose only reader is a
// set_rows (through a reshape) writes into the cache itself, moved to the
// rope's place when nothing in between touches the cache; then consecutive
// ropes and set_rows that do not read each other's results run as one
// launch.
void plan_rope_store(LaunchPlan& p, const std::vector<int>& readers, const CudaOptions& o) {
  const size_t n = p.nodes.size();
  p.rope_store.assign(n, 0);
  p.rope_into.assign(n, -1);
  p.rope_scale.assign(n, -1);
  p.skip.assign(n, false);
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
            p.rope_into[r] = int(j);
            p.skip[j] = true;
          }
        }
        break;
      }
      if (reads(t, &rope)) break;
    }
  }
  // A rope whose only reader is a scale (gemma3's q): its job writes the
  // scaled rows as the scale's result, and the scale is skipped.
  for (size_t r = 0; o.rope_norm && r < n; ++r) {
    const Tensor& rope = *p.nodes[r];
    if (rope.op != Op::Rope || p.rope_into[r] >= 0 || readers[size_t(rope.id)] != 1 || !can_rope_store(rope)) continue;
    for (size_t j = r + 1; j < n; ++j)
      if (reads(*p.nodes[j], &rope)) {
        if (can_rope_scale(rope, *p.nodes[j])) {
          p.rope_scale[r] = int(j);
          p.skip[j] = true;
        }
        break;
      }
  }
  // What a launch member writes: a rope its result (or, written into a
  // cache, the cache too; with a scale, the scale's result), a set_rows its
  // table.
  const auto writes = [&](size_t i) {
    const Tensor& t = *p.nodes[i];
    if (p.rope_scale[i] >= 0) return static_cast<const Tensor*>(p.nodes[size_t(p.rope_scale[i])]);
    return t.op == Op::SetRows ? t.src[0]->storage() : static_cast<const Tensor*>(&t);
  };
  for (size_t i = 0; i < n; ++i) {
    if (p.skip[i] || !can_rope_store(*p.nodes[i]) || p.fused[i] || p.group[i] > 1) continue;
    std::vector<const Tensor*> written = {writes(i)};
    if (p.rope_into[i] >= 0) written.push_back(writes(size_t(p.rope_into[i])));
    int jobs = 1;
    size_t j = i + 1;
    for (; j < n && jobs < rope_store_max_jobs(); ++j) {
      if (p.skip[j]) continue;
      const Tensor& t = *p.nodes[j];
      if (!can_rope_store(t)) break;
      bool independent = true;
      for (const Tensor* w : written) independent = independent && !reads(t, w) && writes(j) != w;
      if (!independent) break;
      written.push_back(writes(j));
      if (p.rope_into[j] >= 0) written.push_back(writes(size_t(p.rope_into[j])));
      ++jobs;
    }
    if (jobs > 1 || p.rope_into[i] >= 0 || p.rope_scale[i] >= 0) {
      p.rope_store[i] = int(j - i);
      // A scale's result is written by this launch: planned as one with it
      // for memory up to the scale.
      for (size_t k = i; k < j; ++k)
        if (p.rope_scale[k] >= 0) p.mem_end[i] = std::max(p.mem_end[i], size_t(p.rope_scale[k]) + 1);
      i = j - 1;
    }
  }
}


}  // namespace

LaunchPlan plan_launches(const Graph& g, const CudaOptions& o) {
  LaunchPlan p;
  for (const Tensor& t : g.tensors()) {
    if (t.op == Op::Leaf || t.op == Op::View) continue;
    p.nodes.push_back(const_cast<Tensor*>(&t));
    p.scratch.push_back(scratch_for(t, o));
  }
  plan_fusion(p, g, o);
  return p;
}

size_t LaunchPlan::launches() const {
  size_t n = 0;
  for (size_t i = 0; i < nodes.size(); i += span(i))
    if (!skip[i]) ++n;
  return n;
}

std::string profile_key(const Tensor& t) {
  std::string k = op_name(t.op);
  if (t.op == Op::MulMat || t.op == Op::MulMatId) {
    const Tensor& w = *t.src[0];
    k += " " + std::string(dtype_name(w.dtype)) + " " + std::to_string(w.ne[1]) + "x" + std::to_string(w.ne[0]) + " T" +
         std::to_string(t.n_rows());
  } else if (t.op == Op::Attention) {
    k += " D" + std::to_string(t.src[0]->ne[0]) + " Hq" + std::to_string(t.src[0]->ne[1]) + " T" +
         std::to_string(t.src[0]->ne[2]) + " S" + std::to_string(t.src[1]->ne[2]);
  } else {
    k += " T" + std::to_string(t.n_rows());
  }
  return k;
}

namespace {
// Whether a member of the rope_store launch at i has a node in `of`
// (rope_norm, rope_scale, rope_bias).
bool any_in_rope_launch(const LaunchPlan& p, size_t i, const std::vector<int>& of) {
  for (size_t k = i; k < i + size_t(p.rope_store[i]); ++k)
    if (of[k] >= 0) return true;
  return false;
}
}  // namespace

std::string LaunchPlan::label(size_t i) const {
  const LaunchPlan& p = *this;
  const std::string rows = " T" + std::to_string(p.nodes[i]->n_rows());
  std::string key = p.norm_chain[i]   ? "rms_norm+mul+add+rms_norm+mul" + rows
                    : p.fold[i]       ? profile_key(*p.nodes[i]) + " +add+rms_norm+mul"
                    : p.fused[i] == 1 ? "rms_norm+mul" + rows
                    : p.fused[i] == 2 ? "add+rms_norm+mul" + rows
                    : p.rope_store[i] ? "rope/set_rows x" + std::to_string(p.rope_store[i]) + rows +
                                            (any_in_rope_launch(p, i, p.rope_norm) ? " +rms_norm+mul" : "") +
                                            (any_in_rope_launch(p, i, p.rope_scale) ? " +scale" : "") +
                                            (any_in_rope_launch(p, i, p.rope_bias) ? " +add" : "")
                                      : profile_key(*p.nodes[i]);
  if (p.quantize_out[i]) key += " +q8";
  if (!p.row_jobs[i].empty()) key += " +rope/set_rows";
  if (p.glu[i])
    key += " +" + std::string(op_name(p.nodes[i + 2]->op)) + (mul_mat_quantizes_x(*p.nodes[i]) ? " +q8" : "");
  if (p.moe[i] != Moe::None)
    key = p.moe[i] == Moe::Route       ? "top_k+moe_weights" + rows
          : p.moe[i] == Moe::ExpertGlu ? "2 x " + profile_key(*p.nodes[i]) + " +" + op_name(p.nodes[i + 2]->op) + " +q8"
                                       : profile_key(*p.nodes[i]) + " +moe_sum";
  if (p.group[i] > 1) key = std::to_string(p.group[i]) + " x " + key;
  return key + (p.fold_from[i] >= 0 ? " (x folded)"
                : p.x_handed[i]     ? " (x handed)"
                : p.x_quantized[i]  ? " (x shared)"
                                    : "");
}

// The planner's promise, checked on every plan: no node of a launch writes
// memory that an input from outside the launch occupies (the blocks of a
// launch run in no set order, so such an overlap is a race).
void check_launch_memory(const LaunchPlan& p) {
  const size_t nn = p.nodes.size();
  const auto overlap = [](const Tensor* a, const Tensor* b) {
    const auto* x = static_cast<const char*>(a->data);
    const auto* y = static_cast<const char*>(b->data);
    return x && y && x < y + b->n_bytes() && y < x + a->n_bytes();
  };
  for (size_t i = 0; i < nn; i += p.span(i)) {
    const size_t end = std::min(nn, p.unit_end(i));
    const auto inside = [&](const Tensor* t) {
      for (size_t k = i; k < end; ++k)
        if (p.nodes[k] == t) return true;
      return false;
    };
    for (size_t k = i; k < end; ++k) {
      const Tensor* out = p.nodes[k];
      if (out->op == Op::SetRows) continue;  // writes its table, which no member reads
      for (size_t j = i; j < end; ++j)
        for (const Tensor* s : p.nodes[j]->src)
          if (s && !inside(s->storage()) && s->storage()->op != Op::Leaf && overlap(out, s->storage()))
            throw Error("cuda backend: the launch at node " + std::to_string(i) + " (" + p.label(i) +
                        ") writes " + out->name + " over its input " + s->storage()->name);
    }
  }
}


}  // namespace weir::cuda
