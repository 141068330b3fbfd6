// AVX2 K-quant dot kernels: not written yet.
#include "backend/cpu/qdot_k_impl.h"

namespace weir::cpu::qk {

QDotKernels avx2_kernels(DType) { return {}; }

}  // namespace weir::cpu::qk
