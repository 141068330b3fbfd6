// Placeholder until the K-quant kernels land (qdot_k.h): no K type has an
// integer path yet, so they keep the float path. Deleted when qdot_k.cpp merges.
#include "backend/cpu/qdot_k.h"

namespace weir::cpu {

QDotKernels qdot_k_kernels(DType, SimdLevel) { return {}; }

}  // namespace weir::cpu
