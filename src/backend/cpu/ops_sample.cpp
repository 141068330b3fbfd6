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
      // A word at a time: most words of a grammar's mask allow nothing or
      // everything.
      for (int64_t w = 0; w * 32 < V; ++w) {
        const int64_t v0 = w * 32, n = std::min<int64_t>(32, V - v0);
        const uint32_t bits = a[w];
        if (bits == 0) {
          std::fill_n(y + v0, n, -INFINITY);
        } else if (bits == ~0u) {
          std::copy_n(x + v0, n, y + v0);
        } else if (n == 32) {  // (a fixed count: the compiler makes it a masked blend)
          for (int k = 0; k < 32; ++k) y[v0 + k] = (bits >> k) & 1u ? x[v0 + k] : -INFINITY;
        } else {
          for (int64_t k = 0; k < n; ++k) y[v0 + k] = (bits >> k) & 1u ? x[v0 + k] : -INFINITY;
        }
      }
    }
  });
}

}  // namespace weir::cpu
