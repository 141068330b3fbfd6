#include "backend/cuda/plan/launch_plan.h"

#include <algorithm>
#include <string>

#include "backend/cuda/plan/plan_state.h"
#include "backend/cuda/plan/product_rules.h"
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

using namespace planner;

// A norm launch (rms_norm + mul) whose result only the next launch's add
// reads, an add + rms_norm + mul: one launch; the second's 8-bit copy, if
// any, goes with it.
void plan_norm_chains(PlanState& p, const Readers& readers, const CudaOptions& o) {
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

// Kernels that can run as one: an rms_norm whose only reader is the mul
// right after it (by a row of weights), together with the add right before
// it when the norm reads that add (the residual stream's pattern); products
// on the same x, one after
// the other with no other user of scratch between them, quantize x once.
void plan_fusion(PlanState& p, const Graph& g, const CudaOptions& o) {
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
    if (producer && next < n && p.nodes[next]->op == Op::MulMat && can_quantize_for(out, *p.nodes[next], o))
      p.at[i].quantize_out = true;
    i = next;
  }
  const Tensor* last_x = nullptr;  // x whose 8-bit blocks scratch holds
  for (size_t i = 0; i < n; ++i) {
    const Tensor& t = *p.nodes[i];
    if (p.at[i].quantize_out) {
      last_x = p.nodes[i + size_t(p.at[i].norm_fused)];
      i += size_t(p.at[i].norm_fused);
    } else if (t.op == Op::MulMat && mul_mat_quantizes_x(t, o)) {
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

// The rope/store launch at i's jobs (its nodes not computed elsewhere).
std::vector<RopeStoreNode> rope_store_jobs(const PlanState& p, size_t i) {
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

LaunchKind kind_of(const PlanState& p, size_t i) {
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
LaunchPlan to_launches(PlanState& w) {
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
    // A GLU launch is the 8-bit kernels' where W's type has them (can_fuse_glu).
    if (l.kind == LaunchKind::ProductsGlu && has_q8_mat_vec(t.src[0]->dtype))
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
  PlanState w;
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
    key += " +" + std::string(op_name(nodes[l.first + 2]->op)) + (has_q8_mat_vec(t.src[0]->dtype) ? " +q8" : "");
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
