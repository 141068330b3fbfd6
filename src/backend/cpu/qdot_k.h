// K-quant (Q2_K..Q6_K) integer dot kernels against Q8_K activations; the
// dispatcher in qdot.cpp asks here for the K types. See qdot.h for the
// contract. Reference kernels are plain C++; SIMD ones live in
// qdot_k_<level>.cpp, one file per target.
#pragma once
#include "backend/cpu/qdot.h"

namespace weir::cpu {

// Empty for types other than the K-quants, or when no kernel exists at
// exactly this level (the dispatcher walks down the levels).
QDotKernels qdot_k_kernels(DType w, SimdLevel level);

}  // namespace weir::cpu
