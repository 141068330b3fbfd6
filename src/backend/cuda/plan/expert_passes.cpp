// The launch planner's mixture-of-experts pass: routing, the experts' GLU
// and their weighted sum in the launches around them.
#include <algorithm>
#include <string>
#include <vector>

#include "backend/cuda/plan/plan_state.h"

namespace weir::cuda::planner {

// The experts' launches: routing (top_k, then moe_weights of its picks);
// gate/up with the GLU where only the down product reads it, on 8-bit x;
// down with moe_sum where only the sum reads it. Nodes of other launches
// are left alone.
void plan_moe(PlanState& p, const Readers& readers, const CudaOptions& o) {
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

}  // namespace weir::cuda::planner
