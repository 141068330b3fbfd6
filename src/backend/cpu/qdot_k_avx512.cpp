// AVX-512 K-quant dot kernels: not written yet.
#include "backend/cpu/qdot_k_impl.h"

namespace weir::cpu::qk {

QDotKernels avx512_kernels(DType) { return {}; }
QDotKernels avx512_vnni_kernels(DType) { return {}; }

}  // namespace weir::cpu::qk
