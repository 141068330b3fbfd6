// STUB (issue 3): only the plain float types until the quantizers land.
#include "core/quant/quantize.h"

#include <cstring>
#include <string>

#include "core/error.h"
#include "core/half.h"

namespace weir::quant {

bool can_quantize(DType t) { return t == DType::F32 || t == DType::F16; }

void quantize_rows(DType t, const float* src, void* dst, int64_t n_rows, int64_t n_per_row) {
  const int64_t n = n_rows * n_per_row;
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, size_t(n) * sizeof(float));
      return;
    case DType::F16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_fp16(src[i]);
      return;
    }
    default:
      throw Error(std::string("cannot quantize to ") + dtype_name(t));
  }
}

}  // namespace weir::quant
