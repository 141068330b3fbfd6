// weir::dequantize_row: dispatch by DType to the reference dequantizers
// (dequantize_legacy.cpp, dequantize_k.cpp, dequantize_lookup.cpp) plus the plain float types.

#include <cstring>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "core/quant/dequantize.h"

namespace weir {
namespace quant {

void dequantize_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, size_t(n) * sizeof(float));
}

// Exact widening; fp16 subnormals become normal float32 values, inf and NaN
// (payload included) carry over.
void dequantize_f16(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    dst[i] = fp16_to_f32(h);
  }
}

// bf16 is the top half of a float32: a shift, bit for bit.
void dequantize_bf16(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    dst[i] = bf16_to_f32(h);
  }
}

}  // namespace quant

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  const DTypeTraits& tr = traits(t);  // throws for unknown ids
  if (n < 0 || n % tr.block_size != 0)
    throw Error(std::string("dequantize_row: ") + std::to_string(n) +
                " elements is not a multiple of the " + tr.name + " block size " +
                std::to_string(tr.block_size));
  const int64_t nb = n / tr.block_size;
  if (nb == 0 && tr.dequantizable) return;
  switch (t) {
    case DType::F32: return quant::dequantize_f32(src, dst, n);
    case DType::F16: return quant::dequantize_f16(src, dst, n);
    case DType::BF16: return quant::dequantize_bf16(src, dst, n);
    case DType::Q4_0: return quant::dequantize_q4_0(src, dst, nb);
    case DType::Q4_1: return quant::dequantize_q4_1(src, dst, nb);
    case DType::Q5_0: return quant::dequantize_q5_0(src, dst, nb);
    case DType::Q5_1: return quant::dequantize_q5_1(src, dst, nb);
    case DType::Q8_0: return quant::dequantize_q8_0(src, dst, nb);
    case DType::Q2_K: return quant::dequantize_q2_K(src, dst, nb);
    case DType::Q3_K: return quant::dequantize_q3_K(src, dst, nb);
    case DType::Q4_K: return quant::dequantize_q4_K(src, dst, nb);
    case DType::Q5_K: return quant::dequantize_q5_K(src, dst, nb);
    case DType::Q6_K: return quant::dequantize_q6_K(src, dst, nb);
    case DType::Q8_K: return quant::dequantize_q8_K(src, dst, nb);
    case DType::IQ4_NL: return quant::dequantize_iq4_nl(src, dst, nb);
    case DType::IQ4_XS: return quant::dequantize_iq4_xs(src, dst, nb);
    case DType::MXFP4: return quant::dequantize_mxfp4(src, dst, nb);
    default: break;
  }
  throw Error(std::string("dequantize_row: no dequantizer for dtype ") + tr.name +
              " (id " + std::to_string(uint32_t(t)) + ")");
}

}  // namespace weir
