// set_rows: writes row t of src (F32 [K, T]) into row idx[t] of the cache
// dst.src[0] (F32, F16 or Q8_0 [K, N]), converting to half for F16 caches and
// quantizing to 8-bit blocks (the reference quantizer) for Q8_0. dst is
// the result node: a view of the cache (same data pointer and strides).
// idx is checked before anything is written; an out-of-range index is a
// weir::Error naming the tensor (thrown by thread 0; no thread writes).
#include <cstring>
#include <string>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ops_common.h"
#include "core/half.h"
#include "core/quant/quantize.h"

namespace weir::cpu {

void op_set_rows(const Tensor& dst, const OpContext& c) {
  const Tensor* cache = dst.src[0];
  const Tensor* src = dst.src[1];
  const Tensor* idx = dst.src[2];
  if (!cache || !src || !idx) return fail(c, "set_rows: " + dst.name + ": missing operands");
  if (dst.dtype != DType::F32 && dst.dtype != DType::F16 && dst.dtype != DType::Q8_0)
    return fail(c, "set_rows: " + dst.name + ": cache " + cache->name + " must be F32, F16 or Q8_0, not " +
                       dtype_name(dst.dtype));
  if (src->dtype != DType::F32 || src->nb[0] != sizeof(float) || idx->dtype != DType::I32)
    return fail(c, "set_rows: " + dst.name + ": src must be F32 and idx I32");
  const int64_t K = dst.ne[0], N = dst.n_rows(), T = src->n_rows();
  if (src->ne[0] != K || idx->n_elements() != T || idx->n_rows() != 1 || K % traits(dst.dtype).block_size != 0)
    return fail(c, "set_rows: " + dst.name + ": shapes " + shape_str(*src) + " and " +
                       shape_str(*idx) + " do not match cache " + shape_str(*cache));
  auto id_at = [&](int64_t t) {
    int32_t v;
    std::memcpy(&v, static_cast<const uint8_t*>(idx->data) + t * idx->nb[0], sizeof(v));
    return v;
  };
  for (int64_t t = 0; t < T; ++t) {
    const int32_t id = id_at(t);
    if (id < 0 || id >= N)
      return fail(c, "set_rows: " + dst.name + ": index " + std::to_string(id) + " (row " +
                         std::to_string(t) + " of " + idx->name + ") is out of range for " +
                         shape_str(*cache));
  }
  for_each_row_chunk(c, T, K, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* s = flat_row<const float>(*src, t);
      const int64_t id = id_at(t);
      if (dst.dtype == DType::F32) {
        std::memcpy(flat_row<float>(dst, id), s, size_t(K) * sizeof(float));
      } else if (dst.dtype == DType::Q8_0) {
        quant::quantize_rows(DType::Q8_0, s, flat_row<uint8_t>(dst, id), 1, K);
      } else {
        auto* d = flat_row<uint8_t>(dst, id);
        for (int64_t i = 0; i < K; ++i) {
          const uint16_t h = f32_to_fp16(s[i]);
          std::memcpy(d + 2 * i, &h, 2);
        }
      }
    }
  });
}

}  // namespace weir::cpu
