// The norm kernels' rules (ops_elementwise.cu), asked on the host.
#include "backend/cuda/plan/kernel_rules.h"

namespace weir::cuda {

bool can_fuse_rms_norm_mul(const Tensor& norm, const Tensor& mul) {
  const Tensor* w = mul.src[1];
  return norm.op == Op::RmsNorm && mul.op == Op::Mul && mul.src[0] == &norm && w && w != &norm &&
         w->dtype == DType::F32 && w->nb[0] == 4 && w->n_rows() == 1 && w->ne[0] == norm.ne[0] && norm.src[0] &&
         norm.src[0]->dtype == DType::F32 && norm.src[0]->nb[0] == 4 && mul.dtype == DType::F32 && mul.nb[0] == 4 &&
         mul.ne[0] == norm.ne[0] && mul.n_rows() == norm.n_rows();
}

bool can_fuse_add_rms_norm_mul(const Tensor& add, const Tensor& norm, const Tensor& mul) {
  const Tensor* a = add.src[0];
  const Tensor* b = add.src[1];
  return add.op == Op::Add && norm.src[0] == &add && can_fuse_rms_norm_mul(norm, mul) && a && b &&
         a->dtype == DType::F32 && b->dtype == DType::F32 && a->nb[0] == 4 && b->nb[0] == 4 && add.nb[0] == 4 &&
         a->ne[0] == add.ne[0] && b->ne[0] == add.ne[0] && a->n_rows() == add.n_rows() && b->n_rows() == add.n_rows();
}

bool can_fuse_norm_add_norm(const Tensor& norm0, const Tensor& mul0, const Tensor& add, const Tensor& norm,
                            const Tensor& mul) {
  return can_fuse_rms_norm_mul(norm0, mul0) && can_fuse_add_rms_norm_mul(add, norm, mul) &&
         (add.src[0] == &mul0 || add.src[1] == &mul0) && add.src[0] != add.src[1] && mul0.ne[0] == add.ne[0] &&
         mul0.n_rows() == add.n_rows() && norm0.src[0] != &add;
}

bool can_quantize_for(const Tensor& out, const Tensor& product, const CudaOptions& o) {
  return mul_mat_quantizes_x(product, o) && product.src[1] == &out && out.dtype == DType::F32 && out.nb[0] == 4 &&
         out.ne[0] % 32 == 0 &&
         (out.op == Op::Mul || out.op == Op::RmsNorm || out.op == Op::SiluMul || out.op == Op::GeluMul ||
          (out.op == Op::Attention && out.src[0] && out.src[0]->ne[0] % 32 == 0));  // a head's dims: whole blocks
}

}  // namespace weir::cuda
