// Scale searches behind the K-quant quantizers (quantize_k.cpp). A K-quant
// super-block of 256 values has one fp16 scale d (and dmin), small integer
// scales per sub-block, and integer quants; these functions choose all three
// to minimise the plain squared error sum((dequant(x) - x)^2) of the block.
//
// The idea is the one llama.cpp's reference quantizers describe (search a
// range of trial scales per sub-block, least-squares fit the scale and min
// to the resulting quants, then quantize the sub-block scales against the
// super-block scale). On top of it: the super-block scale is chosen among
// several grids (so data already in the format comes back exactly), and
// after the scales are integers a local search moves each sub-block's
// integer scale (and min) by one step and a joint least-squares refit of d
// (and dmin) is tried, each kept only when it lowers the error of the block
// as stored (fp16 d, integer scales). The result is never worse than all
// zeros.
#pragma once
#include <cstdint>

namespace weir::quant {

// x ~ (d * sc[j]) * L - (dmin * mn[j]) for L in [0, qmax], sc / mn in
// [0, smax]: q2_K (16 x 16, qmax 3, smax 15), q4_K / q5_K (8 x 32, qmax 15 /
// 31, smax 63).
struct AffineShape {
  int n_sub, sub_len, qmax, smax;
};
struct AffineBlock {
  uint16_t d, dmin;  // fp16 bits
  uint8_t sc[16], mn[16];
  uint8_t L[256];
};
void fit_affine_superblock(const float* x, const AffineShape& shape, AffineBlock* out);

// x ~ (d * sc[j]) * L for L in [qmin, qmax], sc in [-smax, smax]: q3_K
// (L in [-4, 3], smax 31), q6_K (L in [-32, 31], smax 127); 16 x 16.
struct SymmetricShape {
  int n_sub, sub_len, qmin, qmax, smax;
};
struct SymmetricBlock {
  uint16_t d;  // fp16 bits
  int8_t sc[16];
  int8_t L[256];
};
void fit_symmetric_superblock(const float* x, const SymmetricShape& shape, SymmetricBlock* out);

}  // namespace weir::quant
