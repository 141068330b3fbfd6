// weir::quant::quantize_rows: dispatch by DType to the reference quantizers
// (quantize_legacy.cpp, quantize_k.cpp, quantize_lookup.cpp) plus the plain float types. Rows
// are independent and nothing here keeps state, so callers split rows over
// threads as they like.
#include "core/quant/quantize.h"

#include <cstring>
#include <string>

#include "core/error.h"
#include "core/half.h"
#include "core/quant/quantize_blocks.h"

namespace weir::quant {

bool can_quantize(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16:
    case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1: case DType::Q8_0:
    case DType::Q2_K: case DType::Q3_K: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
    case DType::Q8_K: case DType::IQ4_NL: case DType::IQ4_XS: case DType::MXFP4:
      return true;
    default:
      return false;
  }
}

bool uses_importance(DType t) {
  switch (t) {
    case DType::IQ4_NL: case DType::IQ4_XS: case DType::Q2_K: case DType::Q3_K: case DType::Q4_K: case DType::Q5_K:
    case DType::Q6_K:
    case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1:
      return true;
    default:
      return false;
  }
}

void quantize_rows(DType t, const float* src, void* dst, int64_t n_rows, int64_t n_per_row,
                   const float* importance) {
  const DTypeTraits& tr = traits(t);  // throws for unknown ids
  if (!can_quantize(t)) throw Error(std::string("cannot quantize to ") + tr.name);
  if (n_rows < 0 || n_per_row < 0 || n_per_row % tr.block_size != 0)
    throw Error(std::string("quantize_rows: rows of ") + std::to_string(n_per_row) +
                " elements are not a multiple of the " + tr.name + " block size " +
                std::to_string(tr.block_size));
  const int64_t n = n_rows * n_per_row;
  const int64_t nb = n / tr.block_size;  // rows are packed back to back
  switch (t) {
    case DType::F32:
      if (n > 0) std::memcpy(dst, src, size_t(n) * sizeof(float));
      return;
    case DType::F16:
    case DType::BF16: {
      auto* d = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = t == DType::F16 ? f32_to_fp16(src[i]) : f32_to_bf16(src[i]);
        std::memcpy(d + 2 * i, &h, 2);
      }
      return;
    }
    case DType::Q4_0:
      return importance ? quantize_q4_0_weighted(src, dst, nb, importance, n_per_row) : quantize_q4_0(src, dst, nb);
    case DType::Q4_1:
      return importance ? quantize_q4_1_weighted(src, dst, nb, importance, n_per_row) : quantize_q4_1(src, dst, nb);
    case DType::Q5_0:
      return importance ? quantize_q5_0_weighted(src, dst, nb, importance, n_per_row) : quantize_q5_0(src, dst, nb);
    case DType::Q5_1:
      return importance ? quantize_q5_1_weighted(src, dst, nb, importance, n_per_row) : quantize_q5_1(src, dst, nb);
    case DType::Q8_0: return quantize_q8_0(src, dst, nb);
    case DType::Q2_K:
      return importance ? quantize_q2_K_weighted(src, dst, nb, importance, n_per_row) : quantize_q2_K(src, dst, nb);
    case DType::Q3_K:
      return importance ? quantize_q3_K_weighted(src, dst, nb, importance, n_per_row) : quantize_q3_K(src, dst, nb);
    case DType::Q4_K:
      return importance ? quantize_q4_K_weighted(src, dst, nb, importance, n_per_row) : quantize_q4_K(src, dst, nb);
    case DType::Q5_K:
      return importance ? quantize_q5_K_weighted(src, dst, nb, importance, n_per_row) : quantize_q5_K(src, dst, nb);
    case DType::Q6_K:
      return importance ? quantize_q6_K_weighted(src, dst, nb, importance, n_per_row) : quantize_q6_K(src, dst, nb);
    case DType::Q8_K: return quantize_q8_K(src, dst, nb);
    case DType::IQ4_NL: return quantize_iq4_nl(src, dst, nb, importance, n_per_row);
    case DType::IQ4_XS: return quantize_iq4_xs(src, dst, nb, importance, n_per_row);
    case DType::MXFP4: return quantize_mxfp4(src, dst, nb);
    default: break;
  }
  throw Error(std::string("cannot quantize to ") + tr.name);
}

}  // namespace weir::quant
