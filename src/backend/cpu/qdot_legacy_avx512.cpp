// AVX-512 (F+BW+DQ+VL) and AVX-512 VNNI kernels for the legacy block types:
// the 256-bit code of qdot_legacy_simd.h with 32 vector registers, and with
// vpdpbusd forming the integer sums (one instruction for maddubs + madd).
// 256-bit vectors keep llama.cpp's 8-lane float order (qdot.h).
#include <cstring>
#include <vector>

#include "backend/cpu/ops_simd.h"  // <immintrin.h> with GCC's warnings tamed
#include "backend/cpu/qdot_legacy_impl.h"
#include "core/quant/block_formats.h"

namespace weir::cpu::legacy {
namespace ql_avx512 {
#define WEIR_QL_TARGET "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,bmi,bmi2"
#define WEIR_QL_VNNI 0
#define WEIR_QL_REGS 32
#define WEIR_QL_AVX512 1
#include "backend/cpu/qdot_legacy_simd.h"
#undef WEIR_QL_TARGET
#undef WEIR_QL_VNNI
#undef WEIR_QL_REGS
#undef WEIR_QL_AVX512
}  // namespace ql_avx512

namespace ql_avx512_vnni {
#define WEIR_QL_TARGET "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c,bmi,bmi2"
#define WEIR_QL_VNNI 1
#define WEIR_QL_REGS 32
#define WEIR_QL_AVX512 1
#include "backend/cpu/qdot_legacy_simd.h"
#undef WEIR_QL_TARGET
#undef WEIR_QL_VNNI
#undef WEIR_QL_REGS
#undef WEIR_QL_AVX512
}  // namespace ql_avx512_vnni

QDotKernels avx512_kernels(DType w) { return ql_avx512::kernels_for(w); }
QDotKernels avx512_vnni_kernels(DType w) { return ql_avx512_vnni::kernels_for(w); }

}  // namespace weir::cpu::legacy
