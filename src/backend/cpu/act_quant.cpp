#include "backend/cpu/act_quant.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/half.h"

namespace weir::cpu {

DType activation_type(DType w) {
  switch (w) {
    case DType::F32: return DType::F32;
    case DType::F16: return DType::F16;
    case DType::BF16: return DType::BF16;
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
    case DType::IQ4_NL:
    case DType::MXFP4: return DType::Q8_0;  // Q8_1 for the _1 types: same values
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_XS:
    case DType::Q8_K: return DType::Q8_K;
    default: break;
  }
  throw Error(std::string("no activation type for weights of type ") + dtype_name(w));
}

void round_q8_0(const float* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n; b += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
    // As llama.cpp's x86 SIMD quantizer (which made the reference data):
    // multiplier 127/amax, round half to even; the scale is stored as F16.
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const float dh = fp16_to_f32(f32_to_fp16(d));
    for (int j = 0; j < 32; ++j) y[b + j] = std::nearbyint(x[b + j] * id) * dh;
  }
}

void round_q8_K(const float* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n; b += 256) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 256; ++j) {
      const float a = std::fabs(x[b + j]);
      if (a > amax) {
        amax = a;
        max = x[b + j];
      }
    }
    if (amax == 0.0f) {
      for (int j = 0; j < 256; ++j) y[b + j] = 0.0f;
      continue;
    }
    const float iscale = -127.0f / max;
    const float d = 1.0f / iscale;
    for (int j = 0; j < 256; ++j) {
      const float v = std::nearbyint(iscale * x[b + j]);  // round half to even
      y[b + j] = std::min(127.0f, v) * d;
    }
  }
}

void round_f16(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_f32(f32_to_fp16(x[i]));
}

void round_bf16(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

void round_activations(DType w, const float* x, float* y, int64_t n) {
  switch (activation_type(w)) {
    case DType::Q8_0: round_q8_0(x, y, n); return;
    case DType::Q8_K: round_q8_K(x, y, n); return;
    case DType::F16: round_f16(x, y, n); return;
    case DType::BF16: round_bf16(x, y, n); return;
    default:
      if (x != y) std::memcpy(y, x, size_t(n) * sizeof(float));
  }
}

}  // namespace weir::cpu
