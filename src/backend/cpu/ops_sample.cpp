// sample (core/graph.h): a token per row of logits, through the token
// sampler every CPU sampler shares (backend/token_sampler.h). Rows are
// independent; each one is a chunk.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/token_sampler.h"
#include "backend/cpu/ops_common.h"

namespace weir::cpu {

void op_sample(const Tensor& dst, const OpContext& c) {
  const Tensor* logits = dst.src[0];
  const Tensor* params = dst.src[1];
  if (!logits || !params || logits->dtype != DType::F32 || params->dtype != DType::F32 || params->ne[0] != 5 ||
      logits->nb[0] != sizeof(float) || dst.dtype != DType::I32)
    return fail(c, "sample: " + dst.name + ": needs F32 logits [V, n] and F32 params [5, n], gives I32 [n]");
  const int64_t n = logits->n_rows();
  for_each_chunk(c, n, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      static_cast<int32_t*>(dst.data)[r] =
          sample_row(flat_row<const float>(*logits, r), logits->ne[0], flat_row<const float>(*params, r));
  });
}

void op_allow_tokens(const Tensor& dst, const OpContext& c) {
  const Tensor* logits = dst.src[0];
  const Tensor* allow = dst.src[1];
  if (!logits || !allow || logits->dtype != DType::F32 || allow->dtype != DType::I32 || logits->nb[0] != sizeof(float) ||
      allow->nb[0] != sizeof(int32_t) || dst.dtype != DType::F32 || dst.nb[0] != sizeof(float) ||
      allow->ne[0] != (logits->ne[0] + 31) / 32)
    return fail(c, "allow_tokens: " + dst.name + ": needs F32 logits [V, n] and I32 allow [(V + 31) / 32, n]");
  const int64_t V = logits->ne[0];
  for_each_chunk(c, logits->n_rows(), 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = flat_row<const float>(*logits, r);
      const uint32_t* a = reinterpret_cast<const uint32_t*>(flat_row<const int32_t>(*allow, r));
      float* y = flat_row<float>(dst, r);
      for (int64_t v = 0; v < V; ++v) y[v] = (a[v >> 5] >> (v & 31)) & 1u ? x[v] : -INFINITY;
    }
  });
}

}  // namespace weir::cpu
