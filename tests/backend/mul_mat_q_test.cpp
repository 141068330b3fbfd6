// mul_mat on quantized activations (ops_mul_mat_q.cpp) against ref_mul_mat
// on the rounded float activations they stand for, for several thread
// splits and token counts (decode, a partial tile, several token blocks).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/qdot.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/quant/quantize.h"
#include "core/tensor.h"

namespace weir::cpu {
namespace {

Tensor make(DType t, int64_t ne0, int64_t ne1, void* data) {
  Tensor x;
  x.dtype = t;
  x.ne[0] = ne0;
  x.ne[1] = ne1;
  set_contiguous_strides(x);
  x.data = data;
  x.name = "t";
  return x;
}

TEST(MulMatQ, EqualsFloatProductOfRoundedActivations) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (DType wt : {DType::Q8_0, DType::Q5_0, DType::Q4_1}) {
    ASSERT_TRUE(qdot_kernels(wt)) << dtype_name(wt);
    const int64_t K = 96, N = 37;
    // Weights from real quantization of random floats.
    std::vector<float> wf(size_t(K * N));
    for (float& v : wf) v = nd(rng) * 0.1f;
    std::vector<uint8_t> wq(row_bytes(wt, K) * size_t(N));
    quant::quantize_rows(wt, wf.data(), wq.data(), N, K);
    Tensor W = make(wt, K, N, wq.data());
    for (int64_t T : {1, 5, 9}) {
      std::vector<float> x(size_t(K * T)), xr(x.size());
      for (float& v : x) v = nd(rng);
      const DType at = activation_type(wt);
      std::vector<uint8_t> xq(act_row_bytes(wt, K) * size_t(T));
      for (int64_t t = 0; t < T; ++t) {
        round_activations(wt, &x[size_t(t * K)], &xr[size_t(t * K)], K);
        quantize_act(at, &x[size_t(t * K)], &xq[size_t(t) * act_row_bytes(wt, K)], K);
      }
      Tensor Xr = make(DType::F32, K, T, xr.data()), Xq = make(at, K, T, xq.data());
      std::vector<float> want(size_t(N * T)), got(want.size());
      Tensor Yr = make(DType::F32, N, T, want.data());
      Yr.src[0] = &W;
      Yr.src[1] = &Xr;
      ref_mul_mat(Yr);
      for (int nth : {1, 2, 3}) {
        std::fill(got.begin(), got.end(), NAN);
        Tensor Yq = make(DType::F32, N, T, got.data());
        Yq.src[0] = &W;
        Yq.src[1] = &Xq;
        std::vector<Scratch> scratch(static_cast<size_t>(nth));
        for (int ith = 0; ith < nth; ++ith) op_mul_mat(Yq, OpContext{ith, nth, &scratch[size_t(ith)]});
        // Q4_1's min term uses fp16(d * sum a) per block, as llama.cpp's Q8_1
        // activations do: about 2^-11 of each block's m * s, whatever y is.
        const float abs_tol = wt == DType::Q4_1 ? 4e-3f : 0.0f;
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 1e-4f * (1 + std::fabs(want[i])) + abs_tol)
              << dtype_name(wt) << " T " << T << " nth " << nth << " at " << i;
      }
    }
  }
}

}  // namespace
}  // namespace weir::cpu
