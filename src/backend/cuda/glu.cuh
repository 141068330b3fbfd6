// The GLU functions, f(a, b) = act(a) * b, shared by the element-wise GLU
// kernels and the decode products that apply a GLU to their own output.
// Numerics: float, gelu by the tanh formula (the CPU's exact mode).
#pragma once
#include <cuda_runtime.h>

namespace weir::cuda {

__device__ __forceinline__ float gelu_tanh(float x) {
  const float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  const float kCoefA = 0.044715f;
  return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * x * (1.0f + kCoefA * x * x)));
}
struct GeluMulF {
  __device__ float operator()(float a, float b) const { return gelu_tanh(a) * b; }
};
struct SiluMulF {
  __device__ float operator()(float a, float b) const { return a / (1.0f + expf(-a)) * b; }
};
// gpt-oss's clamped SwiGLU (graph.h's swiglu_oai).
struct SwigluOaiF {
  float alpha, limit;
  __device__ float operator()(float a, float b) const {
    const float x = fminf(a, limit), u = fminf(fmaxf(b, -limit), limit);
    return x / (1.0f + expf(alpha * -x)) * (u + 1.0f);
  }
};

}  // namespace weir::cuda
