#include "backend/cuda/run_launches.h"

#include <string>

#include "backend/cuda/moe_ops.h"
#include "backend/cuda/pdl.h"
#include "core/collective.h"
#include "core/error.h"

namespace weir::cuda {
namespace {

// A node alone, by its op's launcher.
void run_single(Tensor& t, const OpCtx& c) {
  switch (t.op) {
    case Op::GetRows: op_get_rows(t, c); break;
    case Op::SetRows: op_set_rows(t, c); break;
    case Op::MulMat: op_mul_mat(t, c); break;
    case Op::RmsNorm: op_rms_norm(t, c); break;
    case Op::LayerNorm: op_layer_norm(t, c); break;
    case Op::Gelu: op_gelu(t, c); break;
    case Op::Add:
    case Op::Mul: op_binary(t, c); break;
    case Op::Scale: op_scale(t, c); break;
    case Op::Softcap: op_softcap(t, c); break;
    case Op::GeluMul:
    case Op::SiluMul:
    case Op::SwigluOai: op_glu(t, c); break;
    case Op::Rope: op_rope(t, c); break;
    case Op::Attention: op_attention(t, c); break;
    case Op::Sample: op_sample(t, c); break;
    case Op::AllowTokens: op_allow_tokens(t, c); break;
    case Op::TopK: op_top_k(t, c); break;
    case Op::MoeWeights: op_moe_weights(t, c); break;
    case Op::MulMatId: op_mul_mat_id(t, c); break;
    case Op::MoeSum: op_moe_sum(t, c); break;
    // The group's collectives, queued on this stream (recorded with the
    // rest of the graph): core/collective.h, comm/gpu_comm.h.
    case Op::AllReduce:
      t.comm->all_reduce_sum(static_cast<const float*>(t.src[0]->data), static_cast<float*>(t.data),
                             size_t(t.n_elements()), c.stream);
      break;
    case Op::AllGather:
      t.comm->all_gather_rows(static_cast<const float*>(t.src[0]->data), size_t(t.src[0]->ne[0]),
                              static_cast<float*>(t.data), size_t(t.ne[0]), t.ne[0], t.ne[1], c.stream);
      break;
    default: throw Error(std::string("cuda backend: no kernel for op ") + op_name(t.op));
  }
}

// Whether the launch takes programmatic dependent launch (by its first
// node's op and position: the knobs that bisect races).
bool takes_pdl(const LaunchPlan& p, const Launch& l, const CudaOptions& o) {
  return pdl_supported() && o.pdl && !pdl_off_for(p.nodes[l.first]->op, o.pdl_off_ops) &&
         !pdl_off_for_node(l.first, o.pdl_nodes);
}

void run_launch(const LaunchPlan& p, const Launch& l, OpCtx& c) {
  Tensor* const* n = &p.nodes[l.first];
  c.pdl = takes_pdl(p, l, c.options());
  c.x_from = l.x_from;
  c.quantize_out = l.quantize_out;
  c.weights_constant = l.weights_constant;
  const bool deferred = l.x_from == ActivationSource::DeferredNorm;
  c.deferred_norm_writer = deferred ? p.nodes[l.deferred_norm_writer] : nullptr;
  c.deferred_norm_eps = deferred ? p.nodes[l.deferred_norm_writer + 2]->fparams[0] : 0.0f;
  c.row_jobs = l.kind == LaunchKind::Products && !l.jobs.empty() ? l.jobs.data() : nullptr;
  switch (l.kind) {
    case LaunchKind::InOtherLaunch: break;
    case LaunchKind::Single: run_single(*n[0], c); break;
    case LaunchKind::NormMul: op_rms_norm_mul(*n[0], *n[1], c); break;
    case LaunchKind::AddNormMul: op_add_rms_norm_mul(*n[0], *n[1], *n[2], c); break;
    case LaunchKind::NormAddNorm: op_norm_add_norm(*n[0], *n[1], *n[2], *n[3], *n[4], c); break;
    case LaunchKind::Products: op_mul_mat_group(n, l.products, c); break;
    case LaunchKind::ProductsGlu: op_mul_mat_glu(*n[0], *n[1], *n[2], c); break;
    case LaunchKind::ProductAddNorm: op_mul_mat_add_norm(*n[0], *n[1], *n[2], *n[3], c); break;
    case LaunchKind::RopeStore: op_rope_store(l.jobs.data(), int(l.jobs.size()), c); break;
    case LaunchKind::Route: op_route(*n[0], *n[1], c); break;
    case LaunchKind::ExpertsGlu: op_expert_glu(*n[0], *n[1], *n[2], c); break;
    case LaunchKind::ExpertsDownSum: op_expert_down_sum(*n[0], *n[1], c); break;
  }
}

}  // namespace

void run_launches(const LaunchPlan& p, size_t begin, size_t end, const OpCtx& ctx) {
  OpCtx c = ctx;
  for (size_t k = begin; k < end && k < p.launches.size(); ++k) run_launch(p, p.launches[k], c);
}

}  // namespace weir::cuda
