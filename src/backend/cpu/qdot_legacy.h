// Integer dot kernels for the 32-element block types (Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0) against Q8_0 activations; the dispatcher in qdot.cpp asks here
// for those types. See qdot.h for the contract.
#pragma once
#include "backend/cpu/qdot.h"

namespace weir::cpu {

// Empty for other types, or when no kernel exists at exactly this level.
QDotKernels qdot_legacy_kernels(DType w, SimdLevel level);

}  // namespace weir::cpu
