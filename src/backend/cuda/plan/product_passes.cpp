// The launch planner's product passes: the GLU in the gate/up launch, the
// residual add and norm in the product launch before them (deferred
// norms), the ropes and cache writes run by the q/k/v launch (row jobs).
#include <algorithm>
#include <string>
#include <vector>

#include "backend/cuda/plan/plan_state.h"

namespace weir::cuda::planner {

// gate/up products read only by a GLU that the next product launch alone
// reads, as 8-bit blocks: the GLU runs in the products' launch. With the
// float decode kernel (F16, ...), gate/up read only by a GLU: the launch
// writes the GLU's result.
void plan_glu(PlanState& p, const Readers& readers, const CudaOptions& o) {
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
void plan_deferred_norms(PlanState& p, const Readers& readers, const CudaOptions& o) {
  const bool on = o.defer_norm;  // off: a norm kernel instead (for comparisons)
  const size_t n = p.nodes.size();
  for (size_t i = 0; on && i + 4 < n; ++i) {
    if (p.at[i].in_other_launch || p.at[i].products != 1 || p.at[i].deferred_norm_writer >= 0 ||
        p.at[i + 1].norm_fused != 2) continue;
    const Tensor& prod = *p.nodes[i];
    const Tensor& mul = *p.nodes[i + 3];
    // The 8-bit kernels' deferred norm replaces the norm's 8-bit blocks;
    // the float kernel's writes mul's result.
    const bool q8 = mul_mat_quantizes_x(prod, o);
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
void plan_row_jobs(PlanState& p, const Readers& readers, const CudaOptions& o) {
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

}  // namespace weir::cuda::planner
