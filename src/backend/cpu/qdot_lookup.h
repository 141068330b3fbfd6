// Integer dot kernels for the lookup types, whose 4-bit quants index a table
// of 16 integers (core/quant/block_formats.h): IQ4_NL and MXFP4 against Q8_0
// activations, IQ4_XS against Q8_K. The dispatcher in qdot.cpp asks here for
// those types. See qdot.h for the contract.
//
// Float order, the same at every level, so levels agree bit for bit: per
// block (IQ4_XS: per super-block) 8 exact integer lanes, lane l the sum of
// w*a over elements 4l..4l+3 of each group of 32 (IQ4_XS: each group's sum
// times its sub-block scale, summed over the 8 groups); one fused
// multiply-add of d_w * d_a into each of 8 float lanes; the horizontal sum
// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). As in qdot_legacy.cpp; llama.cpp's
// own kernels sum in another order, so results agree with it to float
// rounding, not bit for bit.
#pragma once
#include "backend/cpu/qdot.h"

namespace weir::cpu {

// Empty for other types, or when no kernel exists at exactly this level.
QDotKernels qdot_lookup_kernels(DType w, SimdLevel level);

namespace lookup {
// Internal to the qdot_lookup*.cpp files: the AVX2 kernels (also used at
// the AVX-512 levels, which have none of their own yet).
QDotKernels avx2_kernels(DType w);
}  // namespace lookup

}  // namespace weir::cpu
