// Reference K-quant dot kernels (plain C++) and the per-level table.
//
// Each kernel reproduces llama.cpp's AVX2 arithmetic exactly (see
// qdot_k_impl.h): per super-block, exact integer sums in 8 lanes, then one
// fused multiply-add per lane. So the SIMD kernels must match these bit for
// bit, which is what the tests check.
#include <cmath>

#include "backend/cpu/qdot_k.h"
#include "backend/cpu/qdot_k_impl.h"
#include "core/half.h"
#include "core/quant/block_formats.h"

namespace weir::cpu {
namespace qk {
namespace {

using quant::BlockQ2_K;
using quant::BlockQ3_K;
using quant::BlockQ4_K;
using quant::BlockQ5_K;
using quant::BlockQ6_K;
using quant::BlockQ8_K;
using quant::kQK_K;
using quant::load_block;

// 8 float lanes accumulated one fused multiply-add per super-block.
struct Lanes8 {
  float v[8] = {};
  void fma(float d, const int32_t s[8]) {
    for (int k = 0; k < 8; ++k) v[k] = std::fma(d, float(s[k]), v[k]);
  }
  float sum() const { return hsum8(v); }
};

// q2_K: the mins go into the same 8 lanes, first: lane k holds sub-blocks
// 2k and 2k+1 (each min times its group sum from bsums).
float dot_q2_K(int64_t n, const void* w, const void* a) {
  Lanes8 acc;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const auto x = load_block<BlockQ2_K>(w, b);
    const auto y = load_block<BlockQ8_K>(a, b);
    const float d = y.d * fp16_to_f32(x.d);
    const float dmin = -y.d * fp16_to_f32(x.dmin);
    int32_t mins[8], lanes[8] = {};
    for (int k = 0; k < 8; ++k)
      mins[k] = (x.scales[2 * k] >> 4) * y.bsums[2 * k] + (x.scales[2 * k + 1] >> 4) * y.bsums[2 * k + 1];
    for (int i = 0; i < kQK_K; ++i) {
      const int h = i / 128, s = (i / 32) % 4, l = i % 32;
      const int q = (x.qs[32 * h + l] >> (2 * s)) & 3;
      lanes[lane_of(i)] += (x.scales[i / 16] & 0x0F) * q * y.qs[i];
    }
    acc.fma(dmin, mins);
    acc.fma(d, lanes);
  }
  return acc.sum();
}

float dot_q3_K(int64_t n, const void* w, const void* a) {
  Lanes8 acc;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const auto x = load_block<BlockQ3_K>(w, b);
    const auto y = load_block<BlockQ8_K>(a, b);
    const float d = y.d * fp16_to_f32(x.d);
    int8_t sc[16];
    quant::unpack_scales_q3_K(x.scales, sc);
    int32_t lanes[8] = {};
    for (int i = 0; i < kQK_K; ++i) {
      const int h = i / 128, s = (i / 32) % 4, l = i % 32;
      const int lo = (x.qs[32 * h + l] >> (2 * s)) & 3;
      const int hbit = (x.hmask[l] >> (i / 32)) & 1;
      lanes[lane_of(i)] += sc[i / 16] * (lo - (hbit ? 0 : 4)) * y.qs[i];
    }
    acc.fma(d, lanes);
  }
  return acc.sum();
}

// q4_K: the mins go into 4 separate lanes (lane l: sub-blocks 2l, 2l+1),
// summed at the end and added to the main sum.
float dot_q4_K(int64_t n, const void* w, const void* a) {
  Lanes8 acc;
  float acc_m[4] = {};
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const auto x = load_block<BlockQ4_K>(w, b);
    const auto y = load_block<BlockQ8_K>(a, b);
    const float d = y.d * fp16_to_f32(x.d);
    const float dmin = -y.d * fp16_to_f32(x.dmin);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) quant::unpack_scale_min_k4(j, x.scales, &sc[j], &mn[j]);
    for (int l = 0; l < 4; ++l) {
      const int32_t m = mn[2 * l] * (y.bsums[4 * l] + y.bsums[4 * l + 1]) +
                        mn[2 * l + 1] * (y.bsums[4 * l + 2] + y.bsums[4 * l + 3]);
      acc_m[l] = std::fma(dmin, float(m), acc_m[l]);
    }
    int32_t lanes[8] = {};
    for (int i = 0; i < kQK_K; ++i) {
      const int q = (x.qs[32 * (i / 64) + i % 32] >> (4 * ((i / 32) % 2))) & 0x0F;
      lanes[lane_of(i)] += sc[i / 32] * q * y.qs[i];
    }
    acc.fma(d, lanes);
  }
  return acc.sum() + hsum4(acc_m);
}

// q5_K: the mins are summed to one integer per block and go into a scalar.
float dot_q5_K(int64_t n, const void* w, const void* a) {
  Lanes8 acc;
  float summs = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const auto x = load_block<BlockQ5_K>(w, b);
    const auto y = load_block<BlockQ8_K>(a, b);
    const float d = y.d * fp16_to_f32(x.d);
    const float dmin = -y.d * fp16_to_f32(x.dmin);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) quant::unpack_scale_min_k4(j, x.scales, &sc[j], &mn[j]);
    int32_t m = 0;
    for (int j = 0; j < 8; ++j) m += mn[j] * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
    summs = std::fma(dmin, float(m), summs);
    int32_t lanes[8] = {};
    for (int i = 0; i < kQK_K; ++i) {
      const int j = i / 32, l = i % 32;
      const int q = ((x.qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0F) | (((x.qh[l] >> j) & 1) << 4);
      lanes[lane_of(i)] += sc[j] * q * y.qs[i];
    }
    acc.fma(d, lanes);
  }
  return acc.sum() + summs;
}

float dot_q6_K(int64_t n, const void* w, const void* a) {
  Lanes8 acc;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const auto x = load_block<BlockQ6_K>(w, b);
    const auto y = load_block<BlockQ8_K>(a, b);
    const float d = y.d * fp16_to_f32(x.d);
    int32_t lanes[8] = {};
    for (int i = 0; i < kQK_K; ++i) {
      const int h = i / 128, s = (i / 32) % 4, l = i % 32;
      const int lo = (x.ql[64 * h + 32 * (s % 2) + l] >> (4 * (s / 2))) & 0x0F;
      const int hi = (x.qh[32 * h + l] >> (2 * s)) & 3;
      lanes[lane_of(i)] += x.scales[i / 16] * ((lo | (hi << 4)) - 32) * y.qs[i];
    }
    acc.fma(d, lanes);
  }
  return acc.sum();
}

template <VecDotFn Dot>
void tile(int64_t n, const void* w, size_t wstride, int mr, const void* a, size_t astride, int nr,
          float* y, size_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  for (int j = 0; j < nr; ++j)
    for (int i = 0; i < mr; ++i) y[j * ldy + i] = Dot(n, wb + i * wstride, ab + j * astride);
}

template <VecDotFn Dot>
constexpr QDotKernels kernels() {
  return {Dot, tile<Dot>};
}

}  // namespace

QDotKernels reference_kernels(DType w) {
  switch (w) {
    case DType::Q2_K: return kernels<dot_q2_K>();
    case DType::Q3_K: return kernels<dot_q3_K>();
    case DType::Q4_K: return kernels<dot_q4_K>();
    case DType::Q5_K: return kernels<dot_q5_K>();
    case DType::Q6_K: return kernels<dot_q6_K>();
    default: return {};
  }
}

}  // namespace qk

QDotKernels qdot_k_kernels(DType w, SimdLevel level) {
  switch (level) {
    case SimdLevel::Reference: return qk::reference_kernels(w);
    case SimdLevel::AVX2: return qk::avx2_kernels(w);
    case SimdLevel::AVX512: return qk::avx512_kernels(w);
    case SimdLevel::AVX512_VNNI: return qk::avx512_vnni_kernels(w);
  }
  return {};
}

}  // namespace weir::cpu
