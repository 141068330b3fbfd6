// The rope/store launch's rules (ops_rope.cu), asked on the host.
#include "backend/cuda/plan/kernel_limits.h"
#include "backend/cuda/plan/kernel_rules.h"

namespace weir::cuda {

bool can_rope_into(const Tensor& rope, const Tensor& set_rows) {
  const Tensor* src = set_rows.src[1];
  if (rope.op != Op::Rope || set_rows.op != Op::SetRows || !src || src->storage() != &rope) return false;
  if (src != &rope && (src->view_offset != 0 || !src->is_contiguous())) return false;
  const Tensor* table = set_rows.src[0];
  const int64_t D = rope.ne[0], H = rope.ne[1];
  // 8-bit caches: a warp's 32 pairs are whole blocks of one head (D % 64).
  return rope.is_contiguous() && rope.ne[3] == 1 && rope.iparams[0] == D && table &&
         (table->dtype == DType::F32 || table->dtype == DType::F16 || (table->dtype == DType::Q8_0 && D % 64 == 0)) &&
         table->ne[0] == D * H && set_rows.src[2] && set_rows.src[2]->dtype == DType::I32 &&
         set_rows.src[2]->ne[0] == rope.ne[2];
}

bool can_rope_store(const Tensor& t) {
  if (t.op == Op::SetRows) return true;
  return t.op == Op::Rope && t.src[0] && t.iparams[0] == t.src[0]->ne[0] && t.ne[3] == 1;
}

int rope_store_max_jobs() { return kMaxJobs; }

bool can_rope_scale(const Tensor& rope, const Tensor& scale) {
  return rope.op == Op::Rope && scale.op == Op::Scale && scale.src[0] == &rope && scale.dtype == DType::F32 &&
         scale.nb[0] == 4 && scale.ne[0] == rope.ne[0] && scale.ne[1] == rope.ne[1] && scale.ne[2] == rope.ne[2] &&
         scale.ne[3] == 1;
}

bool can_rope_norm(const Tensor& rope, const Tensor& norm, const Tensor& mul) {
  const Tensor* x = norm.src[0];
  const Tensor* w = mul.src[1];
  return can_rope_store(rope) && rope.op == Op::Rope && rope.src[0] == &mul && can_fuse_rms_norm_mul(norm, mul) &&
         x && x->ne[0] == mul.ne[0] && x->ne[1] == mul.ne[1] && x->ne[2] == mul.ne[2] && x->ne[3] == mul.ne[3] &&
         mul.is_contiguous() && w->is_contiguous() && rope.iparams[0] == mul.ne[0] && (mul.ne[0] / 2) % 32 == 0;
}

bool can_rope_bias(const Tensor& x, const Tensor& add) {
  const Tensor* y = add.src[0];
  const Tensor* b = add.src[1];
  if (add.op != Op::Add || x.storage() != &add || x.view_offset != 0 || !x.is_contiguous() || !add.is_contiguous() ||
      add.dtype != DType::F32 || !y || !b || y->dtype != DType::F32 || !y->is_contiguous() || b->dtype != DType::F32 ||
      !b->is_contiguous() || b->ne[0] != add.ne[0] || b->ne[1] * b->ne[2] * b->ne[3] != 1)
    return false;
  for (int d = 0; d < 4; ++d)
    if (y->ne[d] != add.ne[d]) return false;
  return true;
}

}  // namespace weir::cuda
