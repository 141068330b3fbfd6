// Quantization with importance weights, as llama.cpp's *_impl quantizers do
// it when given quant_weights (ggml-quants.c), so that `weir quantize
// --imatrix` gives llama-quantize's bytes; the rules are from there, the code
// is ours:
//   Q4_K, Q5_K: make_qkx3_quants per sub-block of 32 (scale and min),
//     make_qp_quants for the 6-bit sub-block scales and mins;
//   Q6_K: make_qx_quants per sub-block of 16 with the raw weights, 8-bit
//     sub-block scales against d = max_scale / -128;
//   Q2_K: make_qkx3_quants per 16, make_qp_quants for the 4-bit scales and
//     mins, a requantization; Q3_K: make_qx_quants per 16 and for the 6-bit
//     scales;
//   Q4_0, Q5_0: make_qx_quants per block, weights qw * sqrt(sigma2 + x^2)
//     with sigma2 the row's mean square; Q4_1, Q5_1: make_qkx3_quants.
// Without weights the K-quants keep weir's own search (k_fit.h) and the
// legacy types their reference quantizers.
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

// Symmetric fit x ~ scale * (L - nmax), L - nmax in [-nmax, nmax - 1], of
// n values with weights w: the start at -nmax / max (max the value of
// largest magnitude), then 18 trial scales -(nmax + 0.1 is) / max, kept by
// the weighted least-squares score. Returns scale; L in [0, 2 nmax - 1].
float fit_symmetric_weighted(int n, int nmax, const float* x, int8_t* L, const float* w) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) { amax = ax; max = x[i]; }
  }
  if (amax < 1e-15f) {
    std::memset(L, 0, size_t(n));
    return 0.0f;
  }
  auto clamp = [nmax](int l) { return l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l; };
  float iscale = float(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clamp(magic_round(iscale * x[i]));
    L[i] = int8_t(l + nmax);
    sumlx += w[i] * x[i] * float(l);
    suml2 += w[i] * float(l) * float(l);
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(float(nmax) + 0.1f * float(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp(magic_round(iscale * x[i]));
      sumlx += w[i] * x[i] * float(l);
      suml2 += w[i] * float(l) * float(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = int8_t(nmax + clamp(magic_round(iscale * x[i])));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
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

void quantize_q6_K_weighted(const float* x, void* dst, int64_t n_blocks, const float* qw, int64_t qw_period) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    const float* w = qw + (kQK_K * b) % qw_period;
    BlockQ6_K blk;
    std::memset(&blk, 0, sizeof blk);
    int8_t L[kQK_K];
    float scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < 16; ++ib) {
      scales[ib] = fit_symmetric_weighted(16, 32, x + 16 * ib, L + 16 * ib, w + 16 * ib);
      const float a = std::fabs(scales[ib]);
      if (a > max_abs_scale) { max_abs_scale = a; max_scale = scales[ib]; }
    }
    if (max_abs_scale >= 1e-15f) {
      const float iscale = -128.0f / max_scale;
      blk.d = f32_to_fp16(1 / iscale);
      for (int ib = 0; ib < 16; ++ib) {
        const int v = magic_round(iscale * scales[ib]);
        blk.scales[ib] = int8_t(v < 127 ? v : 127);
      }
      const float df = fp16_to_f32(blk.d);
      for (int j = 0; j < 16; ++j) {
        const float d = df * float(blk.scales[j]);
        if (d == 0.0f) continue;  // keeps the fit's quants, as there
        for (int ii = 0; ii < 16; ++ii) {
          const int l = magic_round(x[16 * j + ii] / d);
          L[16 * j + ii] = int8_t((l < -32 ? -32 : l > 31 ? 31 : l) + 32);
        }
      }
      for (int i = 0; i < kQK_K; ++i) {  // as quantize_q6_K packs them (dequantize_k.cpp reads them)
        const int q = L[i], h = i / 128, s = (i / 32) % 4, l = i % 32;
        blk.ql[64 * h + 32 * (s & 1) + l] |= uint8_t((q & 15) << (4 * (s >> 1)));
        blk.qh[32 * h + l] |= uint8_t((q >> 4) << (2 * s));
      }
    }
    std::memcpy(static_cast<uint8_t*>(dst) + b * int64_t(sizeof blk), &blk, sizeof blk);
  }
}

namespace {

// Legacy blocks of 32 in rows of n_per_row: the weights are qw * sqrt(sigma2
// + x^2), sigma2 the row's mean square.
template <typename Fit>
void legacy_rows(const float* x, int64_t n_blocks, const float* qw, int64_t n_per_row, Fit fit) {
  const int64_t per_row = n_per_row / kQK;
  for (int64_t b0 = 0; b0 < n_blocks; b0 += per_row) {
    const float* row = x + b0 * kQK;
    float sum_x2 = 0;
    for (int64_t j = 0; j < n_per_row; ++j) sum_x2 += row[j] * row[j];
    const float sigma2 = sum_x2 / float(n_per_row);
    for (int64_t ib = 0; ib < per_row; ++ib) {
      const float* xb = row + kQK * ib;
      float weight[kQK];
      for (int j = 0; j < kQK; ++j) weight[j] = qw[kQK * ib + j] * std::sqrt(sigma2 + xb[j] * xb[j]);
      fit(b0 + ib, xb, weight);
    }
  }
}

template <typename Block>
void put(void* dst, int64_t b, const Block& blk) {
  std::memcpy(static_cast<uint8_t*>(dst) + b * int64_t(sizeof(Block)), &blk, sizeof(Block));
}

// The 5th bits of 32 quants as q5_0 / q5_1 keep them (element i: bit i).
void pack_q5(const uint8_t* L, uint8_t* qs, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = uint8_t((L[j] & 0x0F) | ((L[j + 16] & 0x0F) << 4));
    qh |= uint32_t((L[j] & 0x10u) >> 4) << j;
    qh |= uint32_t((L[j + 16] & 0x10u) >> 4) << (j + 16);
  }
  std::memcpy(qh_bytes, &qh, 4);
}

}  // namespace

void quantize_q4_0_weighted(const float* x, void* dst, int64_t n_blocks, const float* qw, int64_t n_per_row) {
  legacy_rows(x, n_blocks, qw, n_per_row, [&](int64_t b, const float* xb, const float* w) {
    int8_t L[kQK];
    BlockQ4_0 blk;
    blk.d = f32_to_fp16(fit_symmetric_weighted(kQK, 8, xb, L, w));
    for (int j = 0; j < 16; ++j) blk.qs[j] = uint8_t(L[j] | (L[j + 16] << 4));
    put(dst, b, blk);
  });
}

void quantize_q5_0_weighted(const float* x, void* dst, int64_t n_blocks, const float* qw, int64_t n_per_row) {
  legacy_rows(x, n_blocks, qw, n_per_row, [&](int64_t b, const float* xb, const float* w) {
    int8_t L[kQK];
    BlockQ5_0 blk;
    blk.d = f32_to_fp16(fit_symmetric_weighted(kQK, 16, xb, L, w));
    uint8_t U[kQK];
    for (int j = 0; j < kQK; ++j) U[j] = uint8_t(L[j]);
    pack_q5(U, blk.qs, blk.qh);
    put(dst, b, blk);
  });
}

void quantize_q4_1_weighted(const float* x, void* dst, int64_t n_blocks, const float* qw, int64_t n_per_row) {
  legacy_rows(x, n_blocks, qw, n_per_row, [&](int64_t b, const float* xb, const float* w) {
    uint8_t L[kQK];
    float the_min;
    BlockQ4_1 blk;
    blk.d = f32_to_fp16(fit_affine_weighted(kQK, 15, xb, w, L, &the_min));
    blk.m = f32_to_fp16(-the_min);
    for (int j = 0; j < 16; ++j) blk.qs[j] = uint8_t(L[j] | (L[j + 16] << 4));
    put(dst, b, blk);
  });
}

void quantize_q5_1_weighted(const float* x, void* dst, int64_t n_blocks, const float* qw, int64_t n_per_row) {
  legacy_rows(x, n_blocks, qw, n_per_row, [&](int64_t b, const float* xb, const float* w) {
    uint8_t L[kQK];
    float the_min;
    BlockQ5_1 blk;
    blk.d = f32_to_fp16(fit_affine_weighted(kQK, 31, xb, w, L, &the_min));
    blk.m = f32_to_fp16(-the_min);
    pack_q5(L, blk.qs, blk.qh);
    put(dst, b, blk);
  });
}

// Low 2 bits of element i = 128 h + 32 s + l in qs[32 h + l], bits 2 s.
static void pack_2bit_weighted(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQK_K; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = uint8_t(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

void quantize_q2_K_weighted(const float* x, void* dst, int64_t n_blocks, const float* qw, int64_t qw_period) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    const float* q = qw + (kQK_K * b) % qw_period;
    float sumx2 = 0;
    for (int j = 0; j < kQK_K; ++j) sumx2 += x[j] * x[j];
    const float sigma2 = sumx2 / float(kQK_K);
    uint8_t L[kQK_K];
    float scales[16], mins[16], sw[16];
    for (int j = 0; j < 16; ++j) {
      float weight[16];
      for (int l = 0; l < 16; ++l) weight[l] = q[16 * j + l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
      sw[j] = 0;
      for (int l = 0; l < 16; ++l) sw[j] += weight[l];
      scales[j] = fit_affine_weighted(16, 3, x + 16 * j, weight, L + 16 * j, &mins[j]);
    }
    uint8_t Ls[16], Lm[16];
    const float dm = fit_scales(16, 15, scales, Ls, sw);
    const float mm = fit_scales(16, 15, mins, Lm, sw);
    BlockQ2_K blk;
    blk.d = f32_to_fp16(dm);
    blk.dmin = f32_to_fp16(mm);
    const float df = fp16_to_f32(blk.d), mf = fp16_to_f32(blk.dmin);
    for (int j = 0; j < 16; ++j) blk.scales[j] = uint8_t(Ls[j] | (Lm[j] << 4));
    for (int j = 0; j < 16; ++j) {
      const float d = df * float(blk.scales[j] & 0xF);
      if (d == 0.0f) continue;
      const float m = mf * float(blk.scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        const int l = magic_round((x[16 * j + ii] + m) / d);
        L[16 * j + ii] = uint8_t(l < 0 ? 0 : l > 3 ? 3 : l);
      }
    }
    pack_2bit_weighted(L, blk.qs);
    std::memcpy(static_cast<uint8_t*>(dst) + b * int64_t(sizeof blk), &blk, sizeof blk);
  }
}

void quantize_q3_K_weighted(const float* x, void* dst, int64_t n_blocks, const float* qw, int64_t qw_period) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    const float* q = qw + (kQK_K * b) % qw_period;
    float sumx2 = 0;
    for (int j = 0; j < kQK_K; ++j) sumx2 += x[j] * x[j];
    const float sigma2 = 2 * sumx2 / float(kQK_K);
    int8_t L[kQK_K];
    float scales[16], sw[16];
    for (int j = 0; j < 16; ++j) {
      float weight[16];
      for (int l = 0; l < 16; ++l) weight[l] = q[16 * j + l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
      float sumw = 0;
      for (int l = 0; l < 16; ++l) sumw += weight[l];
      sw[j] = sumw;
      scales[j] = fit_symmetric_weighted(16, 4, x + 16 * j, L + 16 * j, weight);
    }
    BlockQ3_K blk;
    std::memset(&blk, 0, sizeof blk);
    int8_t Ls[16];
    const float d_block = fit_symmetric_weighted(16, 32, scales, Ls, sw);
    for (int j = 0; j < 16; ++j) {
      int l = Ls[j];
      if (j < 8) blk.scales[j] = uint8_t(l & 0xF);
      else blk.scales[j - 8] |= uint8_t((l & 0xF) << 4);
      l >>= 4;
      blk.scales[j % 4 + 8] |= uint8_t(l << (2 * (j / 4)));
    }
    blk.d = f32_to_fp16(d_block);
    int8_t sc[16];
    unpack_scales_q3_K(blk.scales, sc);  // already minus 32
    const float df = fp16_to_f32(blk.d);
    for (int j = 0; j < 16; ++j) {
      const float d = df * float(sc[j]);
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = magic_round(x[16 * j + ii] / d);
        L[16 * j + ii] = int8_t((l < -4 ? -4 : l > 3 ? 3 : l) + 4);
      }
    }
    // The high bit of element j goes to hmask[j % 32], bit j / 32.
    uint8_t U[kQK_K];
    for (int j = 0; j < kQK_K; ++j) {
      U[j] = uint8_t(L[j]);
      if (U[j] > 3) {
        blk.hmask[j % 32] |= uint8_t(1 << (j / 32));
        U[j] = uint8_t(U[j] - 4);
      }
    }
    pack_2bit_weighted(U, blk.qs);
    std::memcpy(static_cast<uint8_t*>(dst) + b * int64_t(sizeof blk), &blk, sizeof blk);
  }
}

}  // namespace weir::quant
