// Q4_K and Q5_K with importance weights: llama.cpp's quantize_row_q4_K_impl
// / quantize_row_q5_K_impl rules (ggml-quants.c: make_qkx3_quants for each
// sub-block's scale and min, make_qp_quants for the 6-bit sub-block scales),
// so that `weir quantize --imatrix` gives llama-quantize's bytes; the code is
// ours. Without weights the K-quants keep weir's own search (k_fit.h).
// Byte equality rests on llama.cpp's float32 operations in its order: keep
// every sum and product below as written (no -ffast-math, no FMA
// contraction). tests/reference/k_quantize_weighted.py is a numpy version.
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "core/quant/block_formats.h"
#include "core/quant/quantize_blocks.h"

namespace weir::quant {
namespace {

// ggml's nearest_int: round half to even through the float32 magic number,
// bit for bit (also for the out-of-range values the caller then clamps).
int magic_round(float v) {
  const float f = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &f, 4);
  return (i & 0x007fffff) - 0x00400000;
}

// Affine fit x ~ scale * L - the_min of n values with weights w, L in
// [0, nmax]: the min-max start, then 37 trial scales, each least-squares
// fitted (min clamped to <= 0) and kept when its weighted squared error is
// lower. Returns scale; *the_min is -min (>= 0).
float fit_affine_weighted(int n, int nmax, const float* x, const float* w, uint8_t* L, float* the_min) {
  constexpr float rmin = -0.9f, rdelta = 0.05f;
  constexpr int nstep = 36;
  float min = x[0], max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max <= min) {
    std::memset(L, 0, size_t(n));
    *the_min = -min;
    return 0.0f;
  }
  float iscale = float(nmax) / (max - min);
  float scale = 1 / iscale;
  float best = 0;
  for (int i = 0; i < n; ++i) {
    int l = magic_round(iscale * (x[i] - min));
    l = l < 0 ? 0 : l > nmax ? nmax : l;
    L[i] = uint8_t(l);
    float diff = scale * float(L[i]) + min - x[i];
    diff = diff * diff;
    best += w[i] * diff;
  }
  uint8_t Laux[32];
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * float(is) + float(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const float v = iscale * (x[i] - min);
      const int l = v > 0 ? magic_round(v < float(nmax) ? v : float(nmax)) : 0;
      Laux[i] = uint8_t(l);
      const float fl = float(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float err = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * float(Laux[i]) + this_min - x[i];
        diff = diff * diff;
        err += w[i] * diff;
      }
      if (err < best) {
        std::memcpy(L, Laux, size_t(n));
        best = err;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Non-negative values x ~ scale * L, L in [0, nmax], weights w: 9 trial
// scales by weighted squared error, then up to 5 passes moving single L to
// their least-squares best. Returns scale. (L is a byte: values that do not
// fit wrap, as there.)
float fit_scales(int n, int nmax, const float* x, uint8_t* L, const float* w) {
  float max = 0;
  for (int i = 0; i < n; ++i) max = max > x[i] ? max : x[i];
  if (max < 1e-15f) {
    std::memset(L, 0, size_t(n));
    return 0.0f;
  }
  float iscale = float(nmax) / max;
  for (int i = 0; i < n; ++i) L[i] = uint8_t(magic_round(iscale * x[i]));
  const float scale = 1 / iscale;
  float best = 0;
  for (int i = 0; i < n; ++i) {
    const float diff = x[i] - scale * float(L[i]);
    best += w[i] * diff * diff;
  }
  for (int is = -4; is <= 4; ++is) {
    if (is == 0) continue;
    const float iscale_is = (0.1f * float(is) + float(nmax)) / max;
    const float scale_is = 1 / iscale_is;
    float mse = 0;
    for (int i = 0; i < n; ++i) {
      int l = magic_round(iscale_is * x[i]);
      l = l < nmax ? l : nmax;
      const float diff = x[i] - scale_is * float(l);
      mse += w[i] * diff * diff;
    }
    if (mse < best) {
      best = mse;
      iscale = iscale_is;
    }
  }
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = magic_round(iscale * x[i]);
    l = l < nmax ? l : nmax;
    L[i] = uint8_t(l);
    sumlx += w[i] * x[i] * float(l);
    suml2 += w[i] * float(l) * float(l);
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float Li = float(L[i]);
      float slx = sumlx - w[i] * x[i] * Li;
      float sl2 = suml2 - w[i] * Li * Li;
      if (slx > 0 && sl2 > 0) {
        int new_l = magic_round(x[i] * sl2 / slx);
        new_l = new_l < nmax ? new_l : nmax;
        if (new_l != int(L[i])) {
          slx += w[i] * x[i] * float(new_l);
          sl2 += w[i] * float(new_l) * float(new_l);
          if (slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = uint8_t(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// The shared part of Q4_K and Q5_K: 8 sub-blocks of 32 with 6-bit scales
// and mins, quants in [0, nmax]. Fills d, dmin, the 12 scale bytes and L.
// clamp63: Q5_K clamps the integer scales to 63, Q4_K does not (they only
// exceed it, wrapped, for negative fitted scales).
void affine_superblock_weighted(const float* x, const float* qw, int nmax, bool clamp63, uint16_t* d, uint16_t* dmin,
                                uint8_t scales_out[kKScaleSize], uint8_t L[kQK_K]) {
  float sum_x2 = 0;
  for (int l = 0; l < kQK_K; ++l) sum_x2 += x[l] * x[l];
  const float sigma2 = 2 * sum_x2 / float(kQK_K);
  float scales[8], mins[8], sw[8];
  for (int j = 0; j < 8; ++j) {
    float weights[32];
    for (int l = 0; l < 32; ++l) weights[l] = qw[32 * j + l] * std::sqrt(sigma2 + x[32 * j + l] * x[32 * j + l]);
    float sumw = 0;
    for (int l = 0; l < 32; ++l) sumw += weights[l];
    sw[j] = sumw;
    scales[j] = fit_affine_weighted(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j]);
  }
  uint8_t Ls[8], Lm[8];
  const float d_block = fit_scales(8, 63, scales, Ls, sw);
  const float m_block = fit_scales(8, 63, mins, Lm, sw);
  std::memset(scales_out, 0, kKScaleSize);
  for (int j = 0; j < 8; ++j) {
    uint8_t ls = Ls[j], lm = Lm[j];
    if (clamp63) {
      ls = ls < 63 ? ls : 63;
      lm = lm < 63 ? lm : 63;
    }
    if (j < 4) {
      scales_out[j] = ls;
      scales_out[j + 4] = lm;
    } else {
      scales_out[j + 4] = uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
      scales_out[j - 4] |= uint8_t((ls >> 4) << 6);
      scales_out[j] |= uint8_t((lm >> 4) << 6);
    }
  }
  *d = f32_to_fp16(d_block);
  *dmin = f32_to_fp16(m_block);
  const float df = fp16_to_f32(*d), mf = fp16_to_f32(*dmin);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    unpack_scale_min_k4(j, scales_out, &sc, &m);
    const float dj = df * float(sc);
    if (dj == 0.0f) continue;  // keeps the fit's quants, as there
    const float dm = mf * float(m);
    for (int ii = 0; ii < 32; ++ii) {
      int l = magic_round((x[32 * j + ii] + dm) / dj);
      L[32 * j + ii] = uint8_t(l < 0 ? 0 : l > nmax ? nmax : l);
    }
  }
}

}  // namespace

void quantize_q4_K_weighted(const float* x, void* dst, int64_t n_blocks, const float* qw, int64_t qw_period) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    BlockQ4_K blk;
    uint8_t L[kQK_K];
    affine_superblock_weighted(x + kQK_K * b, qw + (kQK_K * b) % qw_period, 15, false, &blk.d, &blk.dmin, blk.scales, L);
    for (int j = 0; j < kQK_K; j += 64)
      for (int l = 0; l < 32; ++l) blk.qs[j / 2 + l] = uint8_t(L[j + l] | (L[j + l + 32] << 4));
    std::memcpy(static_cast<uint8_t*>(dst) + b * int64_t(sizeof blk), &blk, sizeof blk);
  }
}

void quantize_q5_K_weighted(const float* x, void* dst, int64_t n_blocks, const float* qw, int64_t qw_period) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    BlockQ5_K blk;
    uint8_t L[kQK_K];
    affine_superblock_weighted(x + kQK_K * b, qw + (kQK_K * b) % qw_period, 31, true, &blk.d, &blk.dmin, blk.scales, L);
    std::memset(blk.qh, 0, sizeof blk.qh);
    for (int n = 0, bit = 0; n < kQK_K; n += 64, bit += 2)
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j], l2 = L[n + j + 32];
        if (l1 > 15) l1 -= 16, blk.qh[j] |= uint8_t(1 << bit);
        if (l2 > 15) l2 -= 16, blk.qh[j] |= uint8_t(2 << bit);
        blk.qs[n / 2 + j] = uint8_t(l1 | (l2 << 4));
      }
    std::memcpy(static_cast<uint8_t*>(dst) + b * int64_t(sizeof blk), &blk, sizeof blk);
  }
}

}  // namespace weir::quant
