// The mixture-of-experts kernels' rules (ops_moe.cu, ops_moe_q8.cu), asked
// on the host.
#include "backend/cuda/plan/moe_rules.h"

#include <algorithm>
#include <cstdint>

#include "backend/cuda/plan/kernel_limits.h"
#include "backend/cuda/plan/kernel_rules.h"
#include "backend/cuda/plan/product_rules.h"

namespace weir::cuda {
namespace {

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

bool rows_aligned(const Tensor& W) {  // as the 8-bit kernels read them
  const size_t a = q8_row_alignment(W.dtype);
  return reinterpret_cast<uintptr_t>(W.data) % a == 0 && W.nb[1] % a == 0 && W.nb[2] % a == 0;
}

}  // namespace

bool can_fuse_route(const Tensor& top_k, const Tensor& weights) {
  const Tensor* l = top_k.src[0];
  return top_k.op == Op::TopK && weights.op == Op::MoeWeights && weights.src[0] == l && weights.src[1] == &top_k &&
         l && l->dtype == DType::F32 && l->nb[0] == 4 && top_k.dtype == DType::I32 && top_k.is_contiguous() &&
         weights.is_contiguous() && weights.ne[0] == top_k.ne[0] && top_k.ne[0] <= 32 &&
         l->ne[0] <= 32 * kRouteValues &&
         weights.n_rows() == top_k.n_rows();
}

bool mul_mat_id_supported(const Tensor& t) {
  return t.src[0] && has_dequantizer(t.src[0]->dtype) && t.src[0]->ne[0] % 8 == 0;
}

int64_t expert_max_tiles(int64_t P, int64_t E, int tile) { return P / tile + E + 1; }

size_t expert_x_bytes(int64_t K, int64_t x_rows) {  // 8-bit blocks, or the MMA tiles' fp16 rows
  return std::max(align256(q8_act_bytes(K, x_rows)), align256(size_t(mma_x_ld(K)) * size_t(x_rows) * 2));
}

size_t expert_scratch_bytes(int64_t K, int64_t x_rows, int64_t P, int64_t E) {
  size_t b = expert_x_bytes(K, x_rows);
  if (P > kExpertDirectPairs) b += align256(size_t(P) * 4) + align256(size_t(expert_max_tiles(P, E)) * 16) + 256;
  return b;
}

bool has_expert_q8(const Tensor& t) {
  const Tensor* W = t.src[0];
  const Tensor* X = t.src[1];
  const Tensor* ids = t.src[2];
  return t.op == Op::MulMatId && W && X && ids && has_q8_mat_vec(W->dtype) && W->ne[0] % 32 == 0 &&
         W->ne[1] % 32 == 0 && X->dtype == DType::F32 && X->nb[0] == 4 && ids->dtype == DType::I32 &&
         ids->is_contiguous() && t.is_contiguous() && rows_aligned(*W);
}

size_t expert_scratch_bytes(const Tensor& t) {
  if (!has_expert_q8(t)) return 0;
  const Tensor& W = *t.src[0];
  return expert_scratch_bytes(W.ne[0], t.src[1]->n_rows(), t.src[2]->n_elements(), W.ne[2]);
}

bool expert_mma(const Tensor& t, const CudaOptions& o) {
  if (!has_expert_q8(t) || t.src[2]->n_elements() <= kExpertDirectPairs) return false;
  const Tensor& W = *t.src[0];
  return mma_tile_fits(t, o) || (o.tile_mma && has_mma_tile(W.dtype) && mma_tail_ok(W.dtype) && W.ne[0] % 32 == 0);
}

bool can_fuse_expert_glu(const Tensor& a, const Tensor& b, const Tensor& glu) {
  if (glu.op != Op::SiluMul && glu.op != Op::GeluMul) return false;
  const Tensor* gate = glu.src[0];
  const Tensor* up = glu.src[1];
  if (!gate || !up || gate == up || !((gate == &a && up == &b) || (gate == &b && up == &a))) return false;
  return has_expert_q8(*gate) && has_expert_q8(*up) && gate->src[0]->dtype == up->src[0]->dtype &&
         gate->src[1] == up->src[1] && gate->src[2] == up->src[2] && gate->src[0]->ne[0] == up->src[0]->ne[0] &&
         gate->src[0]->ne[1] == up->src[0]->ne[1] && gate->src[0]->ne[2] == up->src[0]->ne[2] &&
         glu.dtype == DType::F32 && glu.ne[0] == gate->ne[0] && glu.n_rows() == gate->n_rows();
}

size_t expert_glu_q8_bytes(const Tensor& glu) { return q8_act_bytes(glu.ne[0], glu.n_rows()); }

bool can_fuse_expert_down_sum(const Tensor& down, const Tensor& sum) {
  return sum.op == Op::MoeSum && sum.src[0] == &down && sum.src[1] && sum.src[1]->dtype == DType::F32 &&
         sum.src[1]->is_contiguous() && sum.is_contiguous() && has_expert_q8(down) &&
         down.src[2]->n_elements() <= kExpertDirectPairs && down.src[2]->ne[0] <= kExpertMaxSlots &&
         sum.src[1]->ne[0] == down.src[2]->ne[0] &&
         sum.src[1]->ne[1] == down.src[2]->ne[1];
}

}  // namespace weir::cuda
