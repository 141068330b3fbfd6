// Quantizers of the lookup formats iq4_nl, iq4_xs and mxfp4 (the inverse of
// dequantize_lookup.cpp), made to give llama.cpp's bytes: the rules are
// those published in ggml-quants.c (quantize_iq4_nl, quantize_iq4_xs,
// quantize_row_mxfp4_ref), the code is ours. Byte equality rests on doing
// the same float32 operations in the same order, so keep the order of every
// sum and product below as it is (and never build this file with
// -ffast-math or FMA contraction). tests/reference/iq4_quantize.py is an
// independent numpy version of the same rules.
//
// iq4 in short: each block of 32 gets a scale by a search over 15 trial
// scales (the largest magnitude mapped to table value -127 + itry, itry in
// [-7, 7]), each quant the nearest table value, the scale refit by weighted
// least squares; the weights are x^2, or with an importance matrix
// qw * sqrt(sigma2 + x^2) (sigma2 = twice the block's mean square). iq4_xs
// then stores d = -max_scale / 32 (max_scale the sub-block scale of largest
// magnitude) and 6-bit integer sub-block scales round(scale / d) in
// [-32, 31], and requantizes every element against d * l.
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "core/quant/block_formats.h"
#include "core/quant/quantize_blocks.h"

namespace weir::quant {
namespace {

constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS
constexpr int kNtry = 7;                 // llama-quantize's trial scales each side

// Index of the table value nearest x; at a midpoint, the upper one.
// Comparing 2x against the sum of neighbours keeps the test exact.
int nearest_value_index(float x) {
  const float x2 = x + x;
  int idx = 0;
  for (int step = 8; step > 0; step >>= 1) {
    const int j = idx + step;
    if (x2 >= float(kIQ4NLValues[j - 1] + kIQ4NLValues[j])) idx = j;
  }
  return idx;
}

// Round half to even, as ggml's nearest_int for |x| < 2^22.
int round_even(float x) { return int(std::nearbyint(x)); }

// The least-squares scale of one block of 32 (n = 32), its quants in L.
// Returns 0 (and leaves L unset) for a block whose largest magnitude is
// below kGroupMaxEps.
float fit_block(const float* x, const float* weight, uint8_t* L) {
  float amax = 0, max = 0;
  for (int j = 0; j < kQK; ++j) {
    const float ax = std::fabs(x[j]);
    if (ax > amax) { amax = ax; max = x[j]; }
  }
  if (amax < kGroupMaxEps) return 0.0f;
  const float values0 = float(kIQ4NLValues[0]);
  float d = -max / values0;
  float id = 1 / d;
  float sumqx = 0, sumq2 = 0;
  for (int j = 0; j < kQK; ++j) {
    const int l = nearest_value_index(id * x[j]);
    L[j] = uint8_t(l);
    const float q = float(kIQ4NLValues[l]);
    const float w = weight[j];
    sumqx += w * q * x[j];
    sumq2 += w * q * q;
  }
  d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
  float best = d * sumqx;
  for (int itry = -kNtry; itry <= kNtry; ++itry) {
    id = (float(itry) + values0) / max;
    sumqx = sumq2 = 0;
    for (int j = 0; j < kQK; ++j) {
      const float q = float(kIQ4NLValues[nearest_value_index(id * x[j])]);
      const float w = weight[j];
      sumqx += w * q * x[j];
      sumq2 += w * q * q;
    }
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

// Twice the mean square of n values, summed in order (float32).
float sigma2_of(const float* x, int n) {
  float s = 0;
  for (int j = 0; j < n; ++j) s += x[j] * x[j];
  return s * (2.0f / float(n));
}

// The least-squares weight of each element of a block of 32.
void block_weights(const float* x, const float* qw, float sigma2, float* weight) {
  if (qw) {
    for (int j = 0; j < kQK; ++j) weight[j] = qw[j] * std::sqrt(sigma2 + x[j] * x[j]);
  } else {
    for (int j = 0; j < kQK; ++j) weight[j] = x[j] * x[j];
  }
}

// Nibbles of 32 quants as q4_0 packs them.
void pack_nibbles(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQK / 2; ++j) qs[j] = uint8_t(L[j] | (L[j + kQK / 2] << 4));
}

void iq4_nl_block(const float* x, const float* qw, BlockIQ4_NL* out) {
  float weight[kQK];
  uint8_t L[kQK] = {};
  block_weights(x, qw, sigma2_of(x, kQK), weight);
  const float d = fit_block(x, weight, L);
  out->d = f32_to_fp16(d);
  // Requantize against the float scale (not its fp16 rounding).
  const float id = d != 0.0f ? 1 / d : 0.0f;
  for (int j = 0; j < kQK; ++j) L[j] = uint8_t(nearest_value_index(id * x[j]));
  pack_nibbles(L, out->qs);
}

void iq4_xs_block(const float* x, const float* qw, BlockIQ4_XS* out) {
  constexpr int kSub = kQK_K / kQK;
  const float sigma2 = sigma2_of(x, kQK_K);
  float scales[kSub];
  float max_scale = 0, amax_scale = 0;
  for (int ib = 0; ib < kSub; ++ib) {
    float weight[kQK];
    uint8_t L[kQK];
    block_weights(x + kQK * ib, qw ? qw + kQK * ib : nullptr, sigma2, weight);
    scales[ib] = fit_block(x + kQK * ib, weight, L);
    const float abs_d = std::fabs(scales[ib]);
    if (abs_d > amax_scale) { amax_scale = abs_d; max_scale = scales[ib]; }
  }
  // d is -0.0 for an all-zero super-block (stored as fp16 0x8000), as there.
  const float d = -max_scale / 32;
  out->d = f32_to_fp16(d);
  const float id = d != 0.0f ? 1 / d : 0.0f;
  out->scales_h = 0;
  std::memset(out->scales_l, 0, sizeof out->scales_l);
  for (int ib = 0; ib < kSub; ++ib) {
    int l = round_even(id * scales[ib]);
    l = l < -32 ? -32 : l > 31 ? 31 : l;
    const float dl = d * float(l);
    const float idl = dl != 0.0f ? 1 / dl : 0.0f;
    uint8_t L[kQK];
    for (int j = 0; j < kQK; ++j) L[j] = uint8_t(nearest_value_index(idl * x[kQK * ib + j]));
    pack_nibbles(L, out->qs + (kQK / 2) * ib);
    const int u = l + 32;
    out->scales_l[ib / 2] |= uint8_t((u & 15) << (4 * (ib % 2)));
    out->scales_h |= uint16_t((u >> 4) << (2 * ib));
  }
}

template <typename Block>
void put_block(void* dst, int64_t b, const Block& blk) {
  std::memcpy(static_cast<uint8_t*>(dst) + b * int64_t(sizeof(Block)), &blk, sizeof(Block));
}

}  // namespace

void quantize_iq4_nl(const float* x, void* dst, int64_t n_blocks, const float* qw, int64_t qw_period) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    BlockIQ4_NL blk;
    iq4_nl_block(x + kQK * b, qw ? qw + (kQK * b) % qw_period : nullptr, &blk);
    put_block(dst, b, blk);
  }
}

void quantize_iq4_xs(const float* x, void* dst, int64_t n_blocks, const float* qw, int64_t qw_period) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    BlockIQ4_XS blk;
    iq4_xs_block(x + kQK_K * b, qw ? qw + (kQK_K * b) % qw_period : nullptr, &blk);
    put_block(dst, b, blk);
  }
}

// mxfp4: the shared exponent e puts the block's largest magnitude amax in
// [4, 8) * 2^(e - 128) (floor(log2(amax)) - 2 + 127, 0 for amax = 0); each
// element takes the first of the 16 values nearest to it, as gguf-py's
// MXFP4.quantize_blocks (argmin) and ggml's best_index_mxfp4 do.
void quantize_mxfp4(const float* x, void* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    // Exponents below the uint8 range wrap as the reference's cast does.
    const uint8_t e = amax > 0 ? uint8_t(int(std::floor(std::log2(amax)) - 2 + 127) & 0xFF) : uint8_t(0);
    const float d = e8m0_to_f32_half(e);
    uint8_t L[kQK];
    for (int j = 0; j < kQK; ++j) {
      int best = 0;
      float best_err = std::fabs(float(kMXFP4Values[0]) * d - x[j]);
      for (int i = 1; i < 16; ++i) {
        const float err = std::fabs(float(kMXFP4Values[i]) * d - x[j]);
        if (err < best_err) { best = i; best_err = err; }
      }
      L[j] = uint8_t(best);
    }
    BlockMXFP4 blk;
    blk.e = e;
    pack_nibbles(L, blk.qs);
    put_block(dst, b, blk);
  }
}

}  // namespace weir::quant
