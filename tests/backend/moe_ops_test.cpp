// The mixture-of-experts kernels (ops_moe.cpp) against plain loops written
// here: top_k against a stable sort, moe_weights against a float64 softmax,
// moe_sum against a loop, and mul_mat_id (float and quantized activations,
// a shared or a per-slot input, decode and prefill token counts, several
// thread splits) against ref_mul_mat_id.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/qdot.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/quant/quantize.h"
#include "core/tensor.h"
#include "host_tensor.h"

namespace weir::cpu {
namespace {

using test::host_tensor;

template <class F>
void run_threads(int nth, F&& op) {
  std::vector<Scratch> scratch(static_cast<size_t>(nth));
  for (int ith = 0; ith < nth; ++ith) op(OpContext{ith, nth, &scratch[size_t(ith)]});
}

TEST(MoeOps, TopKIsAStableSortsHead) {
  std::mt19937 rng(3);
  const int64_t E = 16, T = 9;
  for (int k : {1, 3, 16}) {
    std::vector<float> x(size_t(E * T));
    for (float& v : x) v = float(int(rng() % 7)) - 3.0f;  // many ties
    x[5] = NAN;
    std::vector<int32_t> got(size_t(k * T));
    Tensor X = host_tensor(DType::F32, {E, T}, x.data());
    Tensor Y = host_tensor(DType::I32, {k, T}, got.data());
    Y.src[0] = &X;
    run_threads(2, [&](const OpContext& c) { op_top_k(Y, c); });
    for (int64_t t = 0; t < T; ++t) {
      std::vector<int32_t> idx(static_cast<size_t>(E));
      std::iota(idx.begin(), idx.end(), 0);
      auto val = [&](int32_t i) { const float v = x[size_t(t * E + i)]; return std::isnan(v) ? -INFINITY : v; };
      std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return val(a) > val(b); });
      for (int j = 0; j < k; ++j) ASSERT_EQ(got[size_t(t * k + j)], idx[size_t(j)]) << "k " << k << " t " << t << " j " << j;
    }
  }
}

TEST(MoeOps, WeightsAreTheChosenSoftmaxProbabilities) {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const int64_t E = 12, k = 4, T = 5;
  std::vector<float> logits(size_t(E * T));
  for (float& v : logits) v = nd(rng);
  std::vector<int32_t> ids(size_t(k * T));
  for (auto& i : ids) i = int32_t(rng() % E);
  for (bool normalize : {false, true}) {
    std::vector<float> got(size_t(k * T));
    Tensor L = host_tensor(DType::F32, {E, T}, logits.data()), I = host_tensor(DType::I32, {k, T}, ids.data());
    Tensor W = host_tensor(DType::F32, {k, T}, got.data());
    W.src[0] = &L;
    W.src[1] = &I;
    W.iparams[0] = normalize;
    run_threads(3, [&](const OpContext& c) { op_moe_weights(W, c); });
    for (int64_t t = 0; t < T; ++t) {
      double m = -INFINITY, s = 0;
      for (int64_t e = 0; e < E; ++e) m = std::max(m, double(logits[size_t(t * E + e)]));
      for (int64_t e = 0; e < E; ++e) s += std::exp(double(logits[size_t(t * E + e)]) - m);
      std::vector<double> w(static_cast<size_t>(k));
      double sw = 0;
      for (int64_t j = 0; j < k; ++j) sw += w[size_t(j)] = std::exp(double(logits[size_t(t * E + ids[size_t(t * k + j)])]) - m) / s;
      for (int64_t j = 0; j < k; ++j)
        EXPECT_NEAR(got[size_t(t * k + j)], w[size_t(j)] / (normalize ? sw : 1.0), 1e-6) << normalize;
    }
  }
}

TEST(MoeOps, SumWeighsEachSlot) {
  const int64_t N = 7, k = 3, T = 4;
  std::vector<float> y(size_t(N * k * T)), w(size_t(k * T)), got(size_t(N * T));
  for (size_t i = 0; i < y.size(); ++i) y[i] = float(i % 11) - 5.0f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * float(i % 4);
  Tensor Y = host_tensor(DType::F32, {N, k, T}, y.data()), Wt = host_tensor(DType::F32, {k, T}, w.data());
  Tensor S = host_tensor(DType::F32, {N, T}, got.data());
  S.src[0] = &Y;
  S.src[1] = &Wt;
  run_threads(2, [&](const OpContext& c) { op_moe_sum(S, c); });
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      float want = 0;
      for (int64_t j = 0; j < k; ++j) want += w[size_t(t * k + j)] * y[size_t((t * k + j) * N + n)];
      EXPECT_FLOAT_EQ(got[size_t(t * N + n)], want);
    }
}

// mul_mat_id: weights [K, N, E] of type wt; tokens routed at random.
void check_mul_mat_id(DType wt, bool quantized_x, int64_t X_per_token, int64_t T) {
  std::mt19937 rng(uint32_t(T * 7 + X_per_token));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t K = 256, N = 40, E = 6, k = 3;
  std::vector<float> wf(size_t(K * N * E));
  for (float& v : wf) v = nd(rng) * 0.1f;
  std::vector<uint8_t> wq(row_bytes(wt, K) * size_t(N * E));
  quant::quantize_rows(wt, wf.data(), wq.data(), N * E, K);
  Tensor W = host_tensor(wt, {K, N, E}, wq.data());
  std::vector<int32_t> ids(size_t(k * T));
  for (int64_t t = 0; t < T; ++t) {  // k distinct experts a token
    std::vector<int32_t> e(static_cast<size_t>(E));
    std::iota(e.begin(), e.end(), 0);
    std::shuffle(e.begin(), e.end(), rng);
    for (int64_t j = 0; j < k; ++j) ids[size_t(t * k + j)] = e[size_t(j)];
  }
  Tensor I = host_tensor(DType::I32, {k, T}, ids.data());
  const int64_t rows = X_per_token * T;
  std::vector<float> x(size_t(K * rows)), xr(x.size());
  for (float& v : x) v = nd(rng);
  const DType at = activation_type(wt);
  std::vector<uint8_t> xq(act_row_bytes(wt, K) * size_t(rows));
  for (int64_t r = 0; r < rows; ++r) {
    round_activations(wt, &x[size_t(r * K)], &xr[size_t(r * K)], K);
    if (quantized_x) quantize_act(at, &x[size_t(r * K)], &xq[size_t(r) * act_row_bytes(wt, K)], K);
  }
  Tensor Xr = host_tensor(DType::F32, {K, X_per_token, T}, (quantized_x ? xr : x).data());
  Tensor Xq = quantized_x ? host_tensor(at, {K, rows}, xq.data()) : Xr;
  std::vector<float> want(size_t(N * k * T)), got(want.size());
  Tensor Yr = host_tensor(DType::F32, {N, k, T}, want.data());
  Yr.src[0] = &W;
  Yr.src[1] = &Xr;
  Yr.src[2] = &I;
  ref_mul_mat_id(Yr);
  for (int nth : {1, 3}) {
    std::fill(got.begin(), got.end(), NAN);
    Tensor Y = host_tensor(DType::F32, {N, k, T}, got.data());
    Y.src[0] = &W;
    Y.src[1] = &Xq;
    Y.src[2] = &I;
    run_threads(nth, [&](const OpContext& c) { op_mul_mat_id(Y, c); });
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-4f * (1 + std::fabs(want[i])))
          << dtype_name(wt) << (quantized_x ? " quantized x" : " float x") << " X " << X_per_token << " T " << T
          << " nth " << nth << " at " << i;
  }
}

TEST(MoeOps, MulMatIdEqualsTheReference) {
  for (DType wt : {DType::Q8_0, DType::Q4_K, DType::F16})
    for (int64_t T : {1, 2, 13})
      for (int64_t X : {int64_t(1), int64_t(3)}) {
        check_mul_mat_id(wt, false, X, T);
        if (qdot_kernels(wt)) check_mul_mat_id(wt, true, X, T);
      }
}

TEST(MoeOps, MulMatIdRefusesAnExpertOutOfRange) {
  const int64_t K = 32, N = 4, E = 2;
  std::vector<float> w(static_cast<size_t>(K * N * E)), x(static_cast<size_t>(K)), y(static_cast<size_t>(N));
  std::vector<int32_t> ids = {2};
  Tensor W = host_tensor(DType::F32, {K, N, E}, w.data()), X = host_tensor(DType::F32, {K, 1, 1}, x.data());
  Tensor I = host_tensor(DType::I32, {1, 1}, ids.data()), Y = host_tensor(DType::F32, {N, 1, 1}, y.data());
  Y.src[0] = &W;
  Y.src[1] = &X;
  Y.src[2] = &I;
  Scratch s;
  EXPECT_THROW(op_mul_mat_id(Y, OpContext{0, 1, &s}), Error);
}

}  // namespace
}  // namespace weir::cpu
