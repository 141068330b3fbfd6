// Internal to the qdot_legacy*.cpp files: the per-level kernel tables the
// dispatcher in qdot_legacy.cpp combines. Not an interface.
#pragma once
#include "backend/cpu/qdot.h"

namespace weir::cpu::legacy {

QDotKernels avx2_kernels(DType w);
QDotKernels avx512_kernels(DType w);
QDotKernels avx512_vnni_kernels(DType w);

}  // namespace weir::cpu::legacy
