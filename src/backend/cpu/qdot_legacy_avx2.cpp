// AVX2 kernels for the legacy block types (qdot_legacy_simd.h).
#include <cstring>
#include <vector>

#include "backend/cpu/ops_simd.h"  // <immintrin.h> with GCC's warnings tamed
#include "backend/cpu/qdot_legacy_impl.h"
#include "core/quant/block_formats.h"

namespace weir::cpu::legacy {
namespace ql_avx2 {
#define WEIR_QL_TARGET "avx2,fma,f16c,bmi,bmi2"
#define WEIR_QL_VNNI 0
#define WEIR_QL_REGS 16
#define WEIR_QL_AVX512 0
#include "backend/cpu/qdot_legacy_simd.h"
#undef WEIR_QL_TARGET
#undef WEIR_QL_VNNI
#undef WEIR_QL_REGS
#undef WEIR_QL_AVX512
}  // namespace ql_avx2

QDotKernels avx2_kernels(DType w) { return ql_avx2::kernels_for(w); }

}  // namespace weir::cpu::legacy
