// swiglu_oai (graph.h): gpt-oss's clamped SwiGLU, y = x / (1 + e^(-alpha x))
// * (u + 1) with x = min(a, limit) and u = clamp(b, -limit, limit), row by
// row; threads share the rows in chunks, every operand through its own
// strides. Plain float code with expf, as ggml's CPU kernel computes it:
// it runs on the experts' activations only (k rows of FFN width a token).
#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ops_common.h"

namespace weir::cpu {

void op_swiglu_oai(const Tensor& dst, const OpContext& c) {
  const Tensor* a = dst.src[0];
  const Tensor* b = dst.src[1];
  for (const Tensor* t : {&dst, a, b})
    if (!t || t->dtype != DType::F32 || t->nb[0] != sizeof(float))
      return fail(c, "swiglu_oai: " + dst.name + ": operands must be F32 with contiguous rows");
  const int64_t k = dst.ne[0], rows = dst.n_rows();
  if (a->ne[0] != k || b->ne[0] != k || a->n_rows() != rows || b->n_rows() != rows)
    return fail(c, "swiglu_oai: " + dst.name + ": shapes " + shape_str(*a) + " and " + shape_str(*b) +
                       " do not match");
  const float alpha = dst.fparams[0], limit = dst.fparams[1];
  for_each_row_chunk(c, rows, k, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* y = flat_row<float>(dst, r);
      const float* ar = flat_row<const float>(*a, r);
      const float* br = flat_row<const float>(*b, r);
      for (int64_t i = 0; i < k; ++i) {
        const float x = std::min(ar[i], limit);
        const float u = std::clamp(br[i], -limit, limit);
        y[i] = x / (1.0f + std::exp(alpha * -x)) * (u + 1.0f);
      }
    }
  });
}

}  // namespace weir::cpu
