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

namespace weir::cpu {
namespace {

// Throughput of the integer path against the float path (x rounded floats)
// on Gemma 3 270M's shapes, one thread, best of several runs. Not run by
// default (--gtest_also_run_disabled_tests).
TEST(MulMatQ, DISABLED_ThroughputVsFloatPath) {
  struct Shape {
    DType t;
    int64_t K, N, T;
  };
  const Shape shapes[] = {{DType::Q8_0, 640, 65536, 1},
                          {DType::Q5_0, 640, 2048, 1},
                          {DType::Q5_0, 640, 2048, 128},
                          {DType::Q8_0, 640, 1024, 128}};
  std::mt19937 rng(9);
  for (const Shape& s : shapes) {
    std::vector<uint8_t> wq(row_bytes(s.t, s.K) * size_t(s.N));
    for (uint8_t& b : wq) b = uint8_t(rng() & 0x3F);  // small scales, any quants
    Tensor W = make(s.t, s.K, s.N, wq.data());
    std::vector<float> x(size_t(s.K * s.T)), xr(x.size());
    std::normal_distribution<float> nd;
    for (float& v : x) v = nd(rng);
    std::vector<uint8_t> xq(act_row_bytes(s.t, s.K) * size_t(s.T));
    for (int64_t t = 0; t < s.T; ++t) {
      round_activations(s.t, &x[size_t(t * s.K)], &xr[size_t(t * s.K)], s.K);
      quantize_act(activation_type(s.t), &x[size_t(t * s.K)], &xq[size_t(t) * act_row_bytes(s.t, s.K)], s.K);
    }
    Tensor Xr = make(DType::F32, s.K, s.T, xr.data()), Xq = make(activation_type(s.t), s.K, s.T, xq.data());
    std::vector<float> y(size_t(s.N * s.T));
    Tensor Y = make(DType::F32, s.N, s.T, y.data());
    Y.src[0] = &W;
    Scratch scratch;
    auto best = [&](Tensor* x_in) {
      Y.src[1] = x_in;
      double b = 1e30;
      for (int rep = 0; rep < 7; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        op_mul_mat(Y, OpContext{0, 1, &scratch});
        b = std::min(b, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      return b;
    };
    const double tf = best(&Xr), tq = best(&Xq);
    std::printf("%s K %lld N %lld T %lld: float %.3f ms, integer %.3f ms (x%.2f), integer %.1f GB/s of W\n",
                dtype_name(s.t), (long long)s.K, (long long)s.N, (long long)s.T, tf * 1e3, tq * 1e3, tf / tq,
                double(wq.size()) / tq * 1e-9);
  }
}

// Single-thread GMAC/s of the integer path on each of Gemma 3 270M's
// matrix shapes at prefill (T tokens), best of several runs, and the time
// one layer's matrices take per token. Not an assertion (run with
// --gtest_also_run_disabled_tests); the machine may be shared, so compare
// ratios of runs made close together.
TEST(MulMatQ, DISABLED_ThroughputGemmaPrefill) {
  struct Shape {
    DType t;
    int64_t K, N;
    double per_layer;  // how many such matrices one layer has (on average)
  };
  // ffn_down is Q6_K in half of the layers, Q4_K in the others.
  const Shape shapes[] = {{DType::Q5_0, 640, 2048, 2.0}, {DType::Q5_0, 640, 1024, 1.0}, {DType::Q5_0, 640, 256, 1.0},
                          {DType::Q8_0, 640, 256, 1.0},  {DType::Q4_K, 1024, 640, 1.0}, {DType::Q4_K, 2048, 640, 0.5},
                          {DType::Q6_K, 2048, 640, 0.5}};
  const int64_t T = 128;
  std::mt19937 rng(9);
  double layer_s = 0.0;
  for (const Shape& s : shapes) {
    std::vector<uint8_t> wq(row_bytes(s.t, s.K) * size_t(s.N));
    for (uint8_t& b : wq) b = uint8_t(rng() & 0x3F);  // small scales, any quants
    Tensor W = make(s.t, s.K, s.N, wq.data());
    std::vector<float> x(size_t(s.K * T));
    std::normal_distribution<float> nd;
    for (float& v : x) v = nd(rng);
    std::vector<uint8_t> xq(act_row_bytes(s.t, s.K) * size_t(T));
    for (int64_t t = 0; t < T; ++t)
      quantize_act(activation_type(s.t), &x[size_t(t * s.K)], &xq[size_t(t) * act_row_bytes(s.t, s.K)], s.K);
    Tensor Xq = make(activation_type(s.t), s.K, T, xq.data());
    std::vector<float> y(size_t(s.N * T));
    Tensor Y = make(DType::F32, s.N, T, y.data());
    Y.src[0] = &W;
    Y.src[1] = &Xq;
    Scratch scratch;
    double best = 1e30;
    for (int rep = 0; rep < 9; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      op_mul_mat(Y, OpContext{0, 1, &scratch});
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double macs = double(s.K) * double(s.N) * double(T);
    layer_s += best * s.per_layer / double(T);
    std::printf("%s K %lld N %lld T %lld: %.3f ms, %.1f GMAC/s\n", dtype_name(s.t), (long long)s.K,
                (long long)s.N, (long long)T, best * 1e3, macs / best * 1e-9);
  }
  std::printf("one layer's matrices: %.1f us per token (18 layers: %.0f tokens/s, matrices only, 1 thread)\n",
              layer_s * 1e6, 1.0 / (18 * layer_s));
}

}  // namespace
}  // namespace weir::cpu
