// One op suite on every backend present: the CPU (exact mode), the chaos
// backend (tests/chaos: late commands, memory apart, poison), and the CUDA
// backend on a GPU host. Each test drives the backend as a session does
// (plan, copy the inputs in through the queue, run, copy the result out,
// wait; twice, with new inputs the second time) and compares with a plain
// float64 implementation of the op written here, never with the code under
// test. What an op means is tested here; the backends' own suites
// (tests/backend/cpu_ops_test.cpp, tests/cuda/backend_ops_test.cpp) keep
// what only their kernels have: thread splits and SIMD families, llama.cpp's
// rounding, fused launches and the knobs that switch them off.
//
// Tolerances are per backend: the CPU and chaos backends compute in float
// (a float64 product is within 1e-5 of their largest value); the CUDA
// backend rounds activations to 8 bits in its decode products and to fp16
// in its tile and cuBLAS paths. A backend without a kernel for an op and
// dtype (Backend::supports) skips with the reason.
//
// This file: products and get_rows of every weight type, the element-wise
// ops, norm, rope, attention and set_rows of every cache type, sample.
// moe_ops_on_every_backend_test.cpp: the mixture-of-experts ops;
// collectives_on_every_backend_test.cpp: all_reduce and all_gather.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "backends/op_check.h"
#include "core/graph.h"
#include "core/half.h"
#include "q8_blocks.h"
#include "sample_reference.h"

namespace weir {
namespace {

using test::Builder;
using test::bytes_of;
using test::Bytes;
using test::floats_of;
using test::Inputs;
using test::near;
using test::randn;
using test::Tol;

using Build1 = std::function<Tensor*(Graph&)>;
Builder one(const Build1& f) {
  return [f](Graph& g) { return std::vector<Tensor*>{f(g)}; };
}

class Ops : public test::OnEveryBackend<std::string> {};
// A backend and a weight type (WeightOps) or a KV cache type (CacheOps).
class WeightOps : public test::OnEveryBackend<std::tuple<std::string, DType>> {
 protected:
  DType dtype() const { return std::get<1>(GetParam()); }
};
class CacheOps : public WeightOps {};

// --- float64 references ------------------------------------------------------

// y = W x for T tokens (W dequantized, [N][K]); *mag: sum |w x| per output.
std::vector<double> ref_mul_mat(const std::vector<double>& w, const std::vector<float>& x, int64_t K, int64_t N,
                                int64_t T, std::vector<double>* mag = nullptr) {
  std::vector<double> y(size_t(N * T));
  if (mag) mag->assign(y.size(), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0, m = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = w[size_t(n * K + k)] * double(x[size_t(t * K + k)]);
        s += p;
        m += std::fabs(p);
      }
      y[size_t(t * N + n)] = s;
      if (mag) (*mag)[size_t(t * N + n)] = m;
    }
  return y;
}

// Rows of K (ld apart) over R rows: x / sqrt(mean(x^2) + eps), packed.
std::vector<double> ref_rms_norm(const std::vector<float>& x, int64_t K, int64_t R, double eps, int64_t ld = 0) {
  if (ld == 0) ld = K;
  std::vector<double> y(size_t(K * R));
  for (int64_t r = 0; r < R; ++r) {
    double ss = 0;
    for (int64_t k = 0; k < K; ++k) ss += double(x[size_t(r * ld + k)]) * x[size_t(r * ld + k)];
    const double s = 1.0 / std::sqrt(ss / double(K) + eps);
    for (int64_t k = 0; k < K; ++k) y[size_t(r * K + k)] = x[size_t(r * ld + k)] * s;
  }
  return y;
}

double gelu_d(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * x * (1.0 + 0.044715 * x * x))); }

// The CUDA backend's products, against float64: fp16 activations in its
// tensor-core paths (more than 8 tokens), 8-bit ones in its integer decode
// kernels (tests/cuda/backend_ops_test.cpp: Q8DecodeProducts checks those
// exactly), float ones in its float decode kernel.
double cuda_product_tol(DType wt, int64_t T) { return T > 8 ? 5e-3 : test::cuda_q8_decode(wt) ? 3e-2 : 2e-5; }

// --- products and rows of every weight type ----------------------------------

// y = W x for decode (1-8 tokens: CUDA's decode kernels), 9-64 (its tile
// kernels; K 1024 split) and more (cuBLAS on dequantized W).
TEST_P(WeightOps, MulMat) {
  const DType wt = dtype();
  const bool k256 = traits(wt).block_size == 256;
  struct Shape {
    int64_t K, N;
    std::vector<int64_t> tokens;
  };
  const Shape shapes[] = {{k256 ? 512 : 128, 37, {1, 4, 40}}, {k256 ? 1024 : 96, 67, {1, 3, 8, 9, 40, 64, 65, 130}}};
  for (const Shape& s : shapes) {
    const Bytes w = test::random_weights(wt, s.K, s.N, 11 + uint64_t(s.K));
    const std::vector<double> wd = test::dequantized(wt, w, s.K, s.N);
    for (int64_t T : s.tokens) {
      const Builder build = one([&](Graph& g) {
        return g.mul_mat(g.external(wt, {s.K, s.N}, const_cast<uint8_t*>(w.data()), "w"),
                         g.input(DType::F32, {s.K, T}, "x"));
      });
      WEIR_REQUIRE_SUPPORT(b(), build);
      const auto x1 = randn(size_t(s.K * T), 1 + uint32_t(T)), x2 = randn(size_t(s.K * T), 200 + uint32_t(T));
      const auto r = test::run_graph(b(), build, {{{"x", bytes_of(x1)}}, {{"x", bytes_of(x2)}}});
      const Tol tol{cuda() ? cuda_product_tol(wt, T) : 1e-5};
      const std::string what = "K " + std::to_string(s.K) + " T " + std::to_string(T);
      EXPECT_TRUE(near(r[0][0], ref_mul_mat(wd, x1, s.K, s.N, T), tol)) << what;
      EXPECT_TRUE(near(r[1][0], ref_mul_mat(wd, x2, s.K, s.N, T), tol)) << what << ", second run (new x)";
    }
  }
}

// Rows of a table, dequantized: the format's values bit for bit.
TEST_P(WeightOps, GetRows) {
  const DType wt = dtype();
  const int64_t bs = traits(wt).block_size;
  const int64_t K = bs == 256 ? 768 : bs == 32 ? 192 : 200, N = 50;
  const Bytes w = test::random_weights(wt, K, N, 5, 1.0f);
  const Builder build = one([&](Graph& g) {
    return g.get_rows(g.external(wt, {K, N}, const_cast<uint8_t*>(w.data()), "table"), g.input(DType::I32, {5}, "ids"));
  });
  WEIR_REQUIRE_SUPPORT(b(), build);
  auto want = [&](const std::vector<int32_t>& ids) {
    std::vector<float> y(size_t(K) * ids.size());
    for (size_t i = 0; i < ids.size(); ++i)
      dequantize_row(wt, w.data() + size_t(ids[i]) * row_bytes(wt, K), y.data() + i * size_t(K), K);
    return bytes_of(y);
  };
  const std::vector<int32_t> a = {3, 0, 49, 3, 17}, c = {18, 7, 7, 1, 12};
  const auto r = test::run_graph(b(), build, {{{"ids", bytes_of(a)}}, {{"ids", bytes_of(c)}}});
  EXPECT_TRUE(test::same_bytes(r[0][0], want(a)));
  EXPECT_TRUE(test::same_bytes(r[1][0], want(c))) << "second run (new ids)";
}

// Every half but NaN (subnormals, infinities, both zeros) read by get_rows
// of an F16 table: the float of the same value.
TEST_P(Ops, GetRowsOfEveryHalf) {
  const int64_t K = 1024;
  std::vector<uint16_t> h;
  for (uint32_t v = 0; v < 65536; ++v)
    if (((v >> 10) & 0x1f) != 0x1f || (v & 0x3ff) == 0) h.push_back(uint16_t(v));
  const int64_t N = (int64_t(h.size()) + K - 1) / K;
  h.resize(size_t(N * K), 0);
  const Builder build = one([&](Graph& g) {
    return g.get_rows(g.external(DType::F16, {K, N}, h.data(), "table"), g.input(DType::I32, {N}, "ids"));
  });
  WEIR_REQUIRE_SUPPORT(b(), build);
  std::vector<int32_t> up(static_cast<size_t>(N)), down(static_cast<size_t>(N));
  for (int32_t i = 0; i < N; ++i) up[size_t(i)] = i, down[size_t(i)] = int32_t(N) - 1 - i;
  auto want = [&](const std::vector<int32_t>& ids) {
    std::vector<float> y;
    for (int32_t id : ids)
      for (int64_t k = 0; k < K; ++k) y.push_back(fp16_to_f32(h[size_t(id * K + k)]));
    return bytes_of(y);
  };
  const auto r = test::run_graph(b(), build, {{{"ids", bytes_of(up)}}, {{"ids", bytes_of(down)}}});
  EXPECT_TRUE(test::same_bytes(r[0][0], want(up)));
  EXPECT_TRUE(test::same_bytes(r[1][0], want(down)));
}

// Q8_0 weights quantized here by hand (no dequantize_row on the reference's
// side): per 32 values d = fp16(max |w| / 127), q = round(w / d).
TEST_P(Ops, MulMatOfHandQuantizedQ8_0) {
  const int64_t K = 192, N = 41, T = 17;
  const auto wv = randn(size_t(K * N), 3);
  Bytes wb(row_bytes(DType::Q8_0, K) * size_t(N));
  std::vector<double> wd(size_t(K * N));
  for (int64_t blk = 0; blk < K * N / 32; ++blk) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(wv[size_t(blk * 32 + i)]));
    const uint16_t dh = f32_to_fp16(amax / 127.0f);
    const double d = fp16_to_f32(dh);
    uint8_t* p = wb.data() + blk * 34;
    std::memcpy(p, &dh, 2);
    for (int i = 0; i < 32; ++i) {
      const int q = std::clamp(int(std::lround(wv[size_t(blk * 32 + i)] / d)), -127, 127);
      p[2 + i] = uint8_t(int8_t(q));
      wd[size_t(blk * 32 + i)] = d * q;
    }
  }
  const Builder build = one([&](Graph& g) {
    return g.mul_mat(g.external(DType::Q8_0, {K, N}, wb.data(), "w"), g.input(DType::F32, {K, T}, "x"));
  });
  WEIR_REQUIRE_SUPPORT(b(), build);
  const auto x1 = randn(size_t(K * T), 4), x2 = randn(size_t(K * T), 5);
  const auto r = test::run_graph(b(), build, {{{"x", bytes_of(x1)}}, {{"x", bytes_of(x2)}}});
  // Each output within 1e-5 of sum |w x| (CUDA: 17 tokens take fp16 x).
  const Tol tol = cuda() ? Tol{cuda_product_tol(DType::Q8_0, T)} : Tol{0, 1e-5};
  std::vector<double> m1, m2;
  const auto y1 = ref_mul_mat(wd, x1, K, N, T, &m1), y2 = ref_mul_mat(wd, x2, K, N, T, &m2);
  EXPECT_TRUE(near(r[0][0], y1, tol, &m1));
  EXPECT_TRUE(near(r[1][0], y2, tol, &m2)) << "second run";
}

// A product whose weights a set_rows of the same graph writes (a table
// updated in place, as the KV cache is) sees the new rows (CUDA: its kernel
// must not load them early, as it does weights no kernel writes).
TEST_P(Ops, ProductReadsRowsWrittenInTheSameGraph) {
  const int64_t K = 256, N = 64, M = 8;
  const auto tv = randn(size_t(K * N), 91);
  std::vector<uint16_t> table(tv.size());
  for (size_t i = 0; i < tv.size(); ++i) table[i] = f32_to_fp16(tv[i]);
  const std::vector<int32_t> idx = {0, 9, 17, 20, 33, 41, 58, 63};
  for (int64_t T : {int64_t(1), int64_t(3)}) {
    const Builder build = one([&](Graph& g) {
      Tensor* w = g.set_rows(g.input(DType::F16, {K, N}, "table"), g.input(DType::F32, {K, M}, "src"),
                             g.input(DType::I32, {M}, "idx"));
      return g.mul_mat(w, g.input(DType::F32, {K, T}, "x"));
    });
    WEIR_REQUIRE_SUPPORT(b(), build);
    auto want = [&](const std::vector<float>& src, const std::vector<float>& x) {
      std::vector<double> w(table.size());
      for (size_t i = 0; i < w.size(); ++i) w[i] = fp16_to_f32(table[i]);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 0; k < K; ++k)
          w[size_t(idx[size_t(m)] * K + k)] = fp16_to_f32(f32_to_fp16(src[size_t(m * K + k)]));
      return ref_mul_mat(w, x, K, N, T);
    };
    std::vector<Inputs> in;
    std::vector<std::vector<double>> want_runs;
    for (uint32_t run = 0; run < 2; ++run) {
      const auto src = randn(size_t(K * M), 92 + 10 * run), x = randn(size_t(K * T), 93 + 10 * run);
      in.push_back({{"table", bytes_of(table)}, {"src", bytes_of(src)}, {"idx", bytes_of(idx)}, {"x", bytes_of(x)}});
      want_runs.push_back(want(src, x));
    }
    const auto r = test::run_graph(b(), build, in);
    for (size_t run = 0; run < 2; ++run)
      EXPECT_TRUE(near(r[run][0], want_runs[run], Tol{cuda() ? 2e-5 : 1e-5})) << "T " << T << " run " << run;
  }
}

// --- element-wise ops, norm ----------------------------------------------------

// mul and add (b of the same shape, or one row broadcast) and scale: the
// exact result rounded to float once.
TEST_P(Ops, MulAddAndScaleRoundOnce) {
  for (auto [K, R] : {std::pair<int64_t, int64_t>{77, 13}, {300, 7}}) {
    const auto a1 = randn(size_t(K * R), 7), a2 = randn(size_t(K * R), 8), full = randn(size_t(K * R), 9),
               row = randn(size_t(K), 10);
    for (int op = 0; op < 3; ++op)
      for (bool broadcast : {false, true}) {
        if (op == 2 && broadcast) continue;
        const Builder build = one([&](Graph& g) {
          Tensor* a = g.input(DType::F32, {K, R}, "a");
          Tensor* bt = broadcast ? g.input(DType::F32, {K}, "b") : g.input(DType::F32, {K, R}, "b");
          return op == 0 ? g.mul(a, bt) : op == 1 ? g.add(a, bt) : g.scale(a, 0.37f);
        });
        WEIR_REQUIRE_SUPPORT(b(), build);
        const std::vector<float>& bv = broadcast ? row : full;
        auto want = [&](const std::vector<float>& a) {
          std::vector<double> y(a.size());
          for (size_t i = 0; i < a.size(); ++i) {
            const double x = a[i], c = bv[broadcast ? i % size_t(K) : i];
            y[i] = float(op == 0 ? x * c : op == 1 ? x + c : x * double(0.37f));
          }
          return y;
        };
        const Inputs b_in = op == 2 ? Inputs{} : Inputs{{"b", bytes_of(bv)}};
        Inputs in1 = b_in, in2 = b_in;
        in1.push_back({"a", bytes_of(a1)});
        in2.push_back({"a", bytes_of(a2)});
        const auto r = test::run_graph(b(), build, {in1, in2});
        const Tol tol{cuda() ? 1e-7 : 0.0};
        const std::string what = std::string(op == 0 ? "mul" : op == 1 ? "add" : "scale") +
                                 (broadcast ? " of a row" : "") + " K " + std::to_string(K);
        EXPECT_TRUE(near(r[0][0], want(a1), tol)) << what;
        EXPECT_TRUE(near(r[1][0], want(a2), tol)) << what << ", second run";
      }
  }
}

// rms_norm of rows of any length, contiguous and strided (rows 5 floats
// apart past their end: a view).
TEST_P(Ops, RmsNorm) {
  const int64_t R = 9;
  for (int64_t K : {1, 7, 300, 640, 1001})
    for (bool strided : {true, false}) {
      const int64_t ld = strided ? K + 5 : K;
      const Builder build = one([&](Graph& g) {
        Tensor* x = g.input(DType::F32, {ld, R}, "x");
        if (strided) x = g.view(x, {K, R}, {size_t(ld) * 4}, 0);
        return g.rms_norm(x, 1e-6f);
      });
      WEIR_REQUIRE_SUPPORT(b(), build);
      const auto x1 = randn(size_t(ld * R), 11 + uint32_t(K), 3.0f), x2 = randn(size_t(ld * R), 12 + uint32_t(K));
      const auto r = test::run_graph(b(), build, {{{"x", bytes_of(x1)}}, {{"x", bytes_of(x2)}}});
      // 1e-5 of each value (CUDA: and of the largest).
      const Tol tol{cuda() ? 1e-5 : 0.0, 1e-5, 1e-30};
      const std::string what = "K " + std::to_string(K) + (strided ? " strided" : "");
      EXPECT_TRUE(near(r[0][0], ref_rms_norm(x1, K, R, 1e-6, ld), tol)) << what;
      EXPECT_TRUE(near(r[1][0], ref_rms_norm(x2, K, R, 1e-6, ld), tol)) << what << ", second run";
    }
}

// softcap(x, cap) = cap * tanh(x / cap) against the double formula: rows
// contiguous and strided (a view), values from near 0 to far past the cap
// (tanh saturates to +-cap), +-inf to +-cap, caps 30 (Gemma 2's logits) and
// 0.75.
TEST_P(Ops, Softcap) {
  const int64_t K = 300, R = 7;
  for (float cap : {30.0f, 0.75f})
    for (bool strided : {false, true}) {
      const int64_t ld = strided ? K + 3 : K;
      const Builder build = one([&](Graph& g) {
        Tensor* x = g.input(DType::F32, {ld, R}, "x");
        if (strided) x = g.view(x, {K, R}, {size_t(ld) * 4}, 0);
        return g.softcap(x, cap);
      });
      WEIR_REQUIRE_SUPPORT(b(), build);
      auto x1 = randn(size_t(ld * R), 21, 4.0f * cap);
      const auto x2 = randn(size_t(ld * R), 22, 0.3f * cap);
      x1[0] = INFINITY;
      x1[1] = -INFINITY;
      x1[2] = 1e30f;
      x1[3] = -1e-30f;
      x1[4] = 0.0f;
      auto want = [&](const std::vector<float>& x) {
        std::vector<double> y;
        for (int64_t r = 0; r < R; ++r)
          for (int64_t i = 0; i < K; ++i) y.push_back(double(cap) * std::tanh(double(x[size_t(r * ld + i)]) / cap));
        return y;
      };
      const auto r = test::run_graph(b(), build, {{{"x", bytes_of(x1)}}, {{"x", bytes_of(x2)}}});
      const Tol tol{0.0, 4e-7, 1e-37};  // a few float ulps of each value
      const std::string what = "cap " + std::to_string(cap) + (strided ? " strided" : "");
      EXPECT_TRUE(near(r[0][0], want(x1), tol)) << what;
      EXPECT_TRUE(near(r[1][0], want(x2), tol)) << what << ", second run";
      const std::vector<float> y = test::floats_of(r[0][0]);
      EXPECT_EQ(y[0], cap) << what;
      EXPECT_EQ(y[1], -cap) << what;
      EXPECT_EQ(y[2], cap) << what;
      EXPECT_EQ(y[4], 0.0f) << what;
    }
}

// layer_norm of rows of any length, contiguous and strided (a view), rows
// far from zero mean (the variance is taken about the mean, not as
// E[x^2] - m^2); then times a weight plus a bias, as BERT's norms.
TEST_P(Ops, LayerNorm) {
  const int64_t R = 6;
  for (int64_t K : {1, 7, 384, 1001})
    for (bool strided : {false, true}) {
      const int64_t ld = strided ? K + 3 : K;
      const std::vector<float> w = randn(size_t(K), 40), bias = randn(size_t(K), 41);
      const Builder build = [&](Graph& g) {
        Tensor* x = g.input(DType::F32, {ld, R}, "x");
        if (strided) x = g.view(x, {K, R}, {size_t(ld) * 4}, 0);
        Tensor* n = g.layer_norm(x, 1e-12f);
        Tensor* y = g.add(g.mul(n, g.external(DType::F32, {K}, const_cast<float*>(w.data()), "w")),
                          g.external(DType::F32, {K}, const_cast<float*>(bias.data()), "b"));
        return std::vector<Tensor*>{n, y};
      };
      WEIR_REQUIRE_SUPPORT(b(), build);
      auto x1 = randn(size_t(ld * R), 42 + uint32_t(K), 3.0f), x2 = randn(size_t(ld * R), 43 + uint32_t(K));
      for (float& v : x1) v += 50.0f;
      auto want = [&](const std::vector<float>& x, bool affine) {
        std::vector<double> y;
        for (int64_t r = 0; r < R; ++r) {
          double m = 0, v = 0;
          for (int64_t k = 0; k < K; ++k) m += x[size_t(r * ld + k)];
          m /= double(K);
          for (int64_t k = 0; k < K; ++k) v += (x[size_t(r * ld + k)] - m) * (x[size_t(r * ld + k)] - m);
          v /= double(K);
          for (int64_t k = 0; k < K; ++k) {
            const double n = (x[size_t(r * ld + k)] - m) / std::sqrt(v + 1e-12);
            y.push_back(affine ? n * w[size_t(k)] + bias[size_t(k)] : n);
          }
        }
        return y;
      };
      const auto r = test::run_graph(b(), build, {{{"x", bytes_of(x1)}}, {{"x", bytes_of(x2)}}});
      // K = 1: x - m is exactly 0, so every value is 0. Else 2e-5 of the
      // largest (the normalized values are ~1; x1's offset of 50 costs
      // float digits of x - m).
      const Tol tol{2e-5, 1e-5, 1e-30};
      const std::string what = "K " + std::to_string(K) + (strided ? " strided" : "");
      EXPECT_TRUE(near(r[0][0], want(x1, false), tol)) << what;
      EXPECT_TRUE(near(r[0][1], want(x1, true), tol)) << what << ", times w plus b";
      EXPECT_TRUE(near(r[1][0], want(x2, false), tol)) << what << ", second run";
      EXPECT_TRUE(near(r[1][1], want(x2, true), tol)) << what << ", second run, times w plus b";
    }
}

// gelu(a) = gelu_tanh(a) (the exact backends take the formula, as in
// GatedUnits), edges included; contiguous and strided.
TEST_P(Ops, Gelu) {
  const int64_t K = 333, R = 5;
  const float edges[] = {-10.0f, 10.0f, -9.999f, 9.999f, 1e-6f, -3e-7f, 0.0f, -0.0f, 6.1e-5f, -20.0f, 20.0f, 1.0f / 3.0f};
  for (bool strided : {false, true}) {
    const int64_t ld = strided ? K + 3 : K;
    const Builder build = one([&](Graph& g) {
      Tensor* x = g.input(DType::F32, {ld, R}, "a");
      if (strided) x = g.view(x, {K, R}, {size_t(ld) * 4}, 0);
      return g.gelu(x);
    });
    WEIR_REQUIRE_SUPPORT(b(), build);
    std::vector<float> a1 = randn(size_t(ld * R), 44, 4.0f);
    const std::vector<float> a2 = randn(size_t(ld * R), 45, 2.0f);
    std::copy(std::begin(edges), std::end(edges), a1.begin());
    auto want = [&](const std::vector<float>& a, std::vector<double>* mag) {
      std::vector<double> y;
      for (int64_t r = 0; r < R; ++r)
        for (int64_t k = 0; k < K; ++k) {
          y.push_back(gelu_d(a[size_t(r * ld + k)]));
          mag->push_back(std::fabs(double(a[size_t(r * ld + k)])));
        }
      return y;
    };
    const auto r = test::run_graph(b(), build, {{{"a", bytes_of(a1)}}, {{"a", bytes_of(a2)}}});
    std::vector<double> m1, m2;
    const auto w1 = want(a1, &m1), w2 = want(a2, &m2);
    const Tol tol{cuda() ? 1e-5 : 0.0, 1e-5, 1e-30};
    EXPECT_TRUE(near(floats_of(r[0][0]), w1, tol, &m1)) << (strided ? "strided" : "");
    EXPECT_TRUE(near(floats_of(r[1][0]), w2, tol, &m2)) << (strided ? "strided" : "") << ", second run";
  }
}

// A chain, so that intermediates share memory: rms_norm(x) * w + x, scaled.
TEST_P(Ops, NormMulAddScaleChain) {
  const int64_t K = 300, R = 5;
  const auto x1 = randn(size_t(K * R), 3), x2 = randn(size_t(K * R), 4);
  std::vector<float> w = randn(size_t(K), 5);
  const Builder build = one([&](Graph& g) {
    Tensor* x = g.input(DType::F32, {K, R}, "x");
    Tensor* n = g.mul(g.rms_norm(x, 1e-5f), g.external(DType::F32, {K}, w.data(), "w"));
    return g.scale(g.add(n, x), 0.5f);
  });
  WEIR_REQUIRE_SUPPORT(b(), build);
  auto want = [&](const std::vector<float>& x) {
    std::vector<double> y = ref_rms_norm(x, K, R, 1e-5);
    for (size_t i = 0; i < y.size(); ++i) y[i] = (y[i] * w[i % size_t(K)] + x[i]) * 0.5;
    return y;
  };
  const auto [r1, r2] = test::run_twice(b(), [&](Graph& g) { return build(g)[0]; }, {{"x", bytes_of(x1)}},
                                        {{"x", bytes_of(x2)}});
  EXPECT_TRUE(near(r1, want(x1), Tol{2e-6}));
  EXPECT_TRUE(near(r2, want(x2), Tol{2e-6})) << "second run";
}

// silu(a) * b and gelu_tanh(a) * b (the exact backends take the formula,
// not llama.cpp's fp16 table: tests/backend/cpu_ops_test.cpp has that);
// gelu's edges: its +-10 cut-offs in ggml, fp16 subnormals, zeros.
// gpt-oss's clamped SwiGLU against float64: gates and ups on both sides of
// the limit (7), both runs, a strided (non-contiguous rows) gate.
TEST_P(Ops, SwigluOai) {
  const int64_t K = 96, R = 5;
  const float alpha = 1.702f, limit = 7.0f;
  std::vector<float> a1 = randn(size_t(K * 2 * R), 21, 6.0f), a2 = randn(size_t(K * 2 * R), 22, 6.0f);
  const auto b1 = randn(size_t(K * R), 23, 6.0f);
  const float edges[] = {7.0f, 7.5f, -7.5f, 100.0f, -100.0f, 0.0f, 6.99f, -30.0f};
  std::copy(std::begin(edges), std::end(edges), a1.begin());
  const Builder build = one([&](Graph& g) {
    // a: every other row of a [K, 2R] input
    Tensor* a = g.view(g.input(DType::F32, {K, 2 * R}, "a"), {K, R}, {size_t(K) * 8}, 0);
    return g.swiglu_oai(a, g.input(DType::F32, {K, R}, "b"), alpha, limit);
  });
  WEIR_REQUIRE_SUPPORT(b(), build);
  const auto r = test::run_graph(b(), build, {{{"a", bytes_of(a1)}, {"b", bytes_of(b1)}},
                                              {{"a", bytes_of(a2)}, {"b", bytes_of(b1)}}});
  for (int run = 0; run < 2; ++run) {
    const std::vector<float>& a = run ? a2 : a1;
    std::vector<double> want(size_t(K * R));
    for (int64_t row = 0; row < R; ++row)
      for (int64_t i = 0; i < K; ++i) {
        const double x = std::min(double(a[size_t(2 * row * K + i)]), double(limit));
        const double u = std::clamp(double(b1[size_t(row * K + i)]), -double(limit), double(limit));
        want[size_t(row * K + i)] = x / (1 + std::exp(-double(alpha) * x)) * (u + 1);
      }
    EXPECT_TRUE(near(r[size_t(run)][0], want, Tol{1e-6, 1e-6})) << "swiglu_oai, run " << run;
  }
}

TEST_P(Ops, GatedUnits) {
  {
    const int64_t K = 256, R = 3;
    const auto a1 = randn(size_t(K * R), 6), b1 = randn(size_t(K * R), 7), a2 = randn(size_t(K * R), 8);
    const Builder build = one([&](Graph& g) {
      return g.silu_mul(g.input(DType::F32, {K, R}, "a"), g.input(DType::F32, {K, R}, "b"));
    });
    WEIR_REQUIRE_SUPPORT(b(), build);
    auto want = [&](const std::vector<float>& a) {
      std::vector<double> y(a.size());
      for (size_t i = 0; i < a.size(); ++i) y[i] = a[i] / (1 + std::exp(-double(a[i]))) * b1[i];
      return y;
    };
    const auto r = test::run_graph(b(), build, {{{"a", bytes_of(a1)}, {"b", bytes_of(b1)}},
                                                {{"a", bytes_of(a2)}, {"b", bytes_of(b1)}}});
    EXPECT_TRUE(near(r[0][0], want(a1), Tol{2e-6})) << "silu_mul";
    EXPECT_TRUE(near(r[1][0], want(a2), Tol{2e-6})) << "silu_mul, second run";
  }
  const int64_t K = 333, R = 7;
  const float edges[] = {-10.0f, 10.0f, -9.999f, 9.999f, 1e-6f, -3e-7f, 0.0f, -0.0f, 6.1e-5f,
                         70000.0f, -70000.0f, -20.0f, 20.0f, 1.0f / 3.0f};
  std::vector<float> a1 = randn(size_t(K * R), 9, 4.0f), a2 = randn(size_t(K * R), 10, 4.0f);
  const auto g1 = randn(size_t(K * R), 11);
  std::copy(std::begin(edges), std::end(edges), a1.begin());
  std::copy(std::begin(edges), std::end(edges), a2.end() - std::size(edges));
  const Builder build = one([&](Graph& g) {
    return g.gelu_mul(g.input(DType::F32, {K, R}, "a"), g.input(DType::F32, {K, R}, "b"));
  });
  WEIR_REQUIRE_SUPPORT(b(), build);
  const auto r = test::run_graph(b(), build, {{{"a", bytes_of(a1)}, {"b", bytes_of(g1)}},
                                              {{"a", bytes_of(a2)}, {"b", bytes_of(g1)}}});
  for (int run = 0; run < 2; ++run) {
    const std::vector<float>& a = run ? a2 : a1;
    const std::vector<float> got = floats_of(r[size_t(run)][0]);
    // Within 1e-5 of |a b| (CUDA: and 1e-5 of the largest); beyond 1000
    // tanh is 1 or -1 either way, not checked.
    std::vector<float> got_in;
    std::vector<double> want, mag;
    for (size_t i = 0; i < a.size(); ++i) {
      if (std::fabs(a[i]) > 1000.0f) continue;
      got_in.push_back(got[i]);
      want.push_back(gelu_d(a[i]) * g1[i]);
      mag.push_back(std::fabs(double(a[i]) * g1[i]));
    }
    EXPECT_TRUE(near(got_in, want, Tol{cuda() ? 1e-5 : 0.0, 1e-5, 1e-30}, &mag)) << "gelu_mul, run " << run;
  }
}

// --- rope --------------------------------------------------------------------

struct RopeCase {
  int64_t D, H, T;
  int n_rot;
  float base, freq_scale;
  RopeMode mode;
  bool factors;  // freq_factors (Llama 3's rope_freqs)
  bool strided;  // x the first H heads of a fused [D, H + 2, T] buffer (a view)
  std::vector<int32_t> pos1, pos2;
  // A rotated pair (a, b) at position p: within (per_pos * (1 + p) + flat)
  // * (|a| + |b|) + abs of the float64 rotation.
  double per_pos, flat, abs;
};

std::vector<RopeCase> rope_cases() {
  std::vector<RopeCase> v;
  for (RopeMode mode : {RopeMode::Neox, RopeMode::Normal}) {
    v.push_back({64, 3, 5, 48, 10000.0f, 0.5f, mode, false, false, {0, 1, 2, 7, 100}, {5, 6, 7, 8, 9}, 1e-6, 0, 1e-6});
    for (int n_rot : {64, 32})
      for (bool factors : {false, true})
        v.push_back({64, 3, 5, n_rot, 10000.0f, 0.5f, mode, factors, false, {0, 1, 7, 300, 4095},
                     {4095, 300, 7, 1, 0}, 1e-6, 0, 1e-6});
  }
  for (int n_rot : {64, 32})
    v.push_back({64, 3, 5, n_rot, 10000.0f, 1.0f, RopeMode::Neox, false, true, {0, 1, 17, 40, 99}, {3, 4, 5, 6, 7},
                 1e-6, 0, 1e-6});
  // Gemma-like: base 1e6, freq_scale 1/8, 256-dim heads.
  v.push_back({256, 1, 2, 256, 1e6f, 0.125f, RopeMode::Neox, false, false, {3, 12}, {0, 9}, 0, 2e-6, 0});
  return v;
}

TEST_P(Ops, Rope) {
  for (const RopeCase& c : rope_cases()) {
    const int64_t Hall = c.strided ? c.H + 2 : c.H;
    std::vector<float> ff(size_t(c.n_rot / 2));
    const auto fr = randn(ff.size(), 5, 0.2f);
    for (size_t i = 0; i < ff.size(); ++i) ff[i] = 1.0f + std::fabs(fr[i]);
    const Builder build = one([&](Graph& g) {
      const RopeParams rp{c.n_rot, c.base, c.freq_scale, c.mode,
                          c.factors ? g.input(DType::F32, {c.n_rot / 2}, "ff") : nullptr};
      Tensor* x = g.input(DType::F32, {c.D, Hall, c.T}, "x");
      if (c.strided) x = g.view(x, {c.D, c.H, c.T}, {size_t(c.D) * 4, size_t(c.D * Hall) * 4}, 0);
      return g.rope(x, g.input(DType::I32, {c.T}, "pos"), rp);
    });
    WEIR_REQUIRE_SUPPORT(b(), build);
    std::vector<Inputs> in;
    std::vector<std::vector<float>> xs;
    for (uint32_t run = 0; run < 2; ++run) {
      xs.push_back(randn(size_t(c.D * Hall * c.T), 9 + run));
      in.push_back({{"x", bytes_of(xs.back())}, {"pos", bytes_of(run ? c.pos2 : c.pos1)}});
      if (c.factors) in.back().push_back({"ff", bytes_of(ff)});
    }
    const auto r = test::run_graph(b(), build, in);
    const std::string what = std::string(c.mode == RopeMode::Neox ? "neox" : "normal") + " D " + std::to_string(c.D) +
                             " n_rot " + std::to_string(c.n_rot) + (c.factors ? " with factors" : "") +
                             (c.strided ? " strided" : "");
    for (size_t run = 0; run < 2; ++run) {
      const std::vector<float>& x = xs[run];
      const std::vector<int32_t>& pos = run ? c.pos2 : c.pos1;
      const std::vector<float> got = floats_of(r[run][0]);
      std::vector<double> want(got.size()), bound(got.size(), 0.0);
      bool copies_exact = true;
      for (int64_t t = 0; t < c.T; ++t)
        for (int64_t h = 0; h < c.H; ++h) {
          const float* xr = &x[size_t((t * Hall + h) * c.D)];
          const size_t o = size_t((t * c.H + h) * c.D);
          for (int64_t i = 0; i < c.D; ++i) want[o + size_t(i)] = xr[i];
          for (int i = 0; i < c.n_rot / 2; ++i) {
            const double theta = double(c.freq_scale) * pos[size_t(t)] *
                                 std::pow(double(c.base), -2.0 * i / c.n_rot) / (c.factors ? ff[size_t(i)] : 1.0);
            const bool neox = c.mode == RopeMode::Neox;
            const int ia = neox ? i : 2 * i, ib = neox ? i + c.n_rot / 2 : 2 * i + 1;
            const double a = xr[ia], bb = xr[ib];
            want[o + size_t(ia)] = a * std::cos(theta) - bb * std::sin(theta);
            want[o + size_t(ib)] = a * std::sin(theta) + bb * std::cos(theta);
            bound[o + size_t(ia)] = bound[o + size_t(ib)] =
                (c.per_pos * (1.0 + pos[size_t(t)]) + c.flat) * (std::fabs(a) + std::fabs(bb)) + c.abs;
          }
          for (int64_t i = c.n_rot; i < c.D; ++i) copies_exact &= got[o + size_t(i)] == xr[i];
        }
      EXPECT_TRUE(copies_exact) << what << ": dims past n_rot are copied";
      // Each pair within its bound (CUDA: and 4e-5 of the largest value).
      EXPECT_TRUE(near(got, want, Tol{cuda() ? 4e-5 : 0.0, 1.0}, &bound)) << what << ", run " << run;
      // Near position 0, also within 2e-5 of the largest value (CUDA: 4e-5);
      // at 4095 a float angle alone is off by ~1e-4 rad.
      if (*std::max_element(pos.begin(), pos.end()) <= 100) {
        EXPECT_TRUE(near(got, want, Tol{cuda() ? 4e-5 : 2e-5})) << what << ", run " << run;
      }
    }
  }
}

// --- attention and the KV cache, of every cache type ------------------------------

// n values as a cache of type t holds them, and what it holds, as float64.
std::pair<Bytes, std::vector<double>> cache_of(DType t, const std::vector<float>& f) {
  Bytes b;
  std::vector<double> back(f.size());
  if (t == DType::Q8_0) {
    b = test::q8_0_encode(f);
    for (size_t i = 0; i < f.size(); ++i) back[i] = test::q8_0_at(b.data(), int64_t(i));
  } else if (t == DType::F16) {
    std::vector<uint16_t> h(f.size());
    for (size_t i = 0; i < f.size(); ++i) back[i] = fp16_to_f32(h[i] = f32_to_fp16(f[i]));
    b = bytes_of(h);
  } else {
    b = bytes_of(f);
    back.assign(f.begin(), f.end());
  }
  return {b, back};
}

struct AttnCase {
  int64_t D, Hq, Hkv, T, S, Smax;
  int64_t pos0, window;  // token t at pos0 + t sees key j <= pos0 + t with pos0 + t - j < window
  bool last_row_masked;  // the last token sees no key (as a batch's padding rows): zeros
  bool strided_q;        // q a view of a fused [D, Hq + 2 Hkv, T] buffer
  float softcap = 0.0f;  // graph.h's attention extras: the scores' soft cap
  bool sinks = false;    // and a sink logit per head
};

// softmax(q k^T * scale + mask) v, grouped heads, k and v views of the
// first S cells of a cache of Smax; a sliding window; a fully masked row;
// a prefill from position 0 with long runs of keys; soft-capped scores and
// sinks (graph.h's extras), in decodes over long spans (split keys merged)
// and prefills.
TEST_P(CacheOps, Attention) {
  const DType kv = dtype();
  std::vector<AttnCase> cases = {{64, 4, 2, 3, 40, 40, 30, 1 << 30, false, false}};
  for (int64_t Hkv : {1, 2})
    for (int64_t D : {int64_t(64), int64_t(kv == DType::Q8_0 ? 32 : 40)})
      cases.push_back({D, 4, Hkv, 6, 45, 64, 39, 20, true, true});
  cases.push_back({32, 4, 1, 70, 70, 80, 0, 1 << 30, false, false});
  const size_t plain = cases.size();
  for (size_t i = 0; i < plain; ++i) {
    AttnCase e = cases[i];
    e.softcap = 2.0f;
    cases.push_back(e);
    e.softcap = 0.0f;
    e.sinks = true;
    cases.push_back(e);
  }
  for (const float cap : {0.0f, 3.0f}) {
    cases.push_back({64, 8, 2, 1, 1500, 1600, 1499, 1 << 30, false, false, cap, true});  // decode, split keys
    cases.push_back({64, 8, 2, 4, 1500, 1600, 1496, 1 << 30, false, false, cap, true});  // 4 tokens of one sequence
    cases.push_back({128, 8, 1, 48, 300, 320, 252, 1 << 30, false, false, cap, true});   // prefill
    cases.push_back({64, 8, 2, 40, 600, 640, 560, 128, true, false, cap, true});        // prefill, window
  }
  for (const AttnCase& c : cases) {
    const int64_t Hall = c.Hq + 2 * c.Hkv;
    const float scale = 1.0f / std::sqrt(float(c.D));
    const Builder build = one([&](Graph& g) {
      Tensor* q = c.strided_q ? g.view(g.input(DType::F32, {c.D, Hall, c.T}, "qkv"), {c.D, c.Hq, c.T},
                                       {size_t(c.D) * 4, size_t(c.D * Hall) * 4}, 0)
                              : g.input(DType::F32, {c.D, c.Hq, c.T}, "qkv");
      auto cache = [&](const char* name) {
        return g.view(g.input(kv, {c.D, c.Hkv, c.Smax}, name), {c.D, c.Hkv, c.S},
                      {row_bytes(kv, c.D), row_bytes(kv, c.D * c.Hkv)}, 0);
      };
      AttentionExtras extras;
      extras.softcap = c.softcap;
      if (c.sinks) extras.sinks = g.input(DType::F32, {c.Hq}, "sinks");
      return g.attention(q, cache("k"), cache("v"), g.input(DType::F32, {c.S, c.T}, "mask"), scale, false, 0, extras);
    });
    WEIR_REQUIRE_SUPPORT(b(), build);
    std::vector<float> mask(size_t(c.S * c.T), 0.0f);
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t j = 0; j < c.S; ++j) {
        const int64_t p = c.pos0 + t;
        if (j > p || p - j >= c.window || (c.last_row_masked && t == c.T - 1)) mask[size_t(t * c.S + j)] = -INFINITY;
      }
    std::vector<Inputs> in;
    std::vector<std::vector<double>> want, mag;
    for (uint32_t run = 0; run < 2; ++run) {
      const auto qkv = randn(size_t(c.D * (c.strided_q ? Hall : c.Hq) * c.T), 13 + run);
      const auto [kb, kd] = cache_of(kv, randn(size_t(c.D * c.Hkv * c.Smax), 11 + 2 * run, 1.5f));
      const auto [vb, vd] = cache_of(kv, randn(size_t(c.D * c.Hkv * c.Smax), 12 + 2 * run, 1.5f));
      in.push_back({{"qkv", bytes_of(qkv)}, {"k", kb}, {"v", vb}, {"mask", bytes_of(mask)}});
      // Sinks from well below to well above the scores (head 0: a sink
      // that takes most of the weight).
      std::vector<float> sinks = randn(size_t(c.Hq), 17 + run, 2.0f);
      sinks[0] = 6.0f;
      if (c.sinks) in.back().push_back({"sinks", bytes_of(sinks)});
      std::vector<double> y(size_t(c.D * c.Hq * c.T), 0.0), m(y.size(), 0.0);
      const int64_t q_heads = c.strided_q ? Hall : c.Hq;
      for (int64_t t = 0; t < c.T; ++t)
        for (int64_t h = 0; h < c.Hq; ++h) {
          const int64_t g = h / (c.Hq / c.Hkv);
          const float* q = &qkv[size_t((t * q_heads + h) * c.D)];
          std::vector<double> s(size_t(c.S));
          double mx = -INFINITY;
          for (int64_t j = 0; j < c.S; ++j) {
            double d = 0;
            for (int64_t i = 0; i < c.D; ++i) d += double(q[i]) * kd[size_t((j * c.Hkv + g) * c.D + i)];
            d *= scale;
            if (c.softcap > 0) d = c.softcap * std::tanh(d / c.softcap);
            s[size_t(j)] = d + mask[size_t(t * c.S + j)];
            mx = std::max(mx, s[size_t(j)]);
          }
          if (mx == -INFINITY) continue;  // no key: zeros
          if (c.sinks) mx = std::max(mx, double(sinks[size_t(h)]));
          double sum = c.sinks ? std::exp(sinks[size_t(h)] - mx) : 0.0;
          for (double& e : s) sum += (e = std::exp(e - mx));
          for (int64_t i = 0; i < c.D; ++i) {
            double o = 0, a = 0;
            for (int64_t j = 0; j < c.S; ++j) {
              const double v = vd[size_t((j * c.Hkv + g) * c.D + i)];
              o += s[size_t(j)] / sum * v;
              a += s[size_t(j)] / sum * std::fabs(v);
            }
            y[size_t(t * c.D * c.Hq + h * c.D + i)] = o;
            m[size_t(t * c.D * c.Hq + h * c.D + i)] = a;
          }
        }
      want.push_back(y);
      mag.push_back(m);
    }
    const auto r = test::run_graph(b(), build, in);
    const std::string what = "D " + std::to_string(c.D) + " Hkv " + std::to_string(c.Hkv) + " T " +
                             std::to_string(c.T) + " S " + std::to_string(c.S) +
                             (c.softcap > 0 ? " softcap " + std::to_string(c.softcap) : "") + (c.sinks ? " sinks" : "");
    for (size_t run = 0; run < 2; ++run) {
      // Within 2e-5 of sum p|v| (CUDA: 5e-3 of the largest value), and a
      // row that sees no key exactly zeros (the near() bound there is 0
      // only on the exact backends, so look at it on its own).
      const std::vector<float> got = floats_of(r[run][0]);
      EXPECT_TRUE(near(got, want[run], Tol{cuda() ? 5e-3 : 0.0, 2e-5, 1e-6}, &mag[run])) << what << ", run " << run;
      if (c.last_row_masked) {
        for (int64_t i = (c.T - 1) * c.D * c.Hq; i < c.T * c.D * c.Hq; ++i)
          ASSERT_EQ(got[size_t(i)], 0.0f) << what << ": a row that sees no key, value " << i;
      }
    }
  }
}

// set_rows writes each source row, as the cache type holds it (F32 as is,
// F16 rounded to nearest, Q8_0 the format's blocks: tests/q8_blocks.h),
// into its row of the cache, bit for bit, and leaves the other rows as they
// were; a later op of the same graph reads the new rows.
TEST_P(CacheOps, SetRows) {
  const DType ct = dtype();
  struct Case {
    int64_t K, N;
    std::vector<int32_t> idx1, idx2;
    uint8_t fill;      // the cache's bytes before
    bool zero_block;   // source row 1's second block all zeros (Q8_0: d = 0)
  };
  // Zeros before; and 0x5A bytes before, an odd width (not Q8_0), a block
  // of zeros (Q8_0).
  const std::vector<Case> cases = {{96, 10, {9, 0, 4}, {1, 2, 3}, 0, false},
                                   ct == DType::Q8_0 ? Case{96, 7, {6, 0, 3}, {2, 5, 1}, 0x5A, true}
                                                     : Case{37, 11, {9, 0, 4, 10}, {1, 5, 6, 2}, 0x5A, false}};
  auto encoded = [&](const std::vector<float>& row) {
    return cache_of(ct, row).first;  // the row as the cache type holds it
  };
  for (const Case& c : cases) {
    const int64_t T = int64_t(c.idx1.size());
    const Builder build = one([&](Graph& g) {
      return g.set_rows(g.input(ct, {c.K, c.N}, "cache"), g.input(DType::F32, {c.K, T}, "src"),
                        g.input(DType::I32, {T}, "idx"));
    });
    WEIR_REQUIRE_SUPPORT(b(), build);
    const Bytes before(row_bytes(ct, c.K) * size_t(c.N), c.fill);
    std::vector<Inputs> in;
    std::vector<Bytes> want;
    for (uint32_t run = 0; run < 2; ++run) {
      std::vector<float> src = randn(size_t(c.K * T), 15 + run);
      if (c.zero_block) std::fill(src.begin() + c.K + 32, src.begin() + c.K + 64, 0.0f);
      const std::vector<int32_t>& idx = run ? c.idx2 : c.idx1;
      in.push_back({{"cache", before}, {"src", bytes_of(src)}, {"idx", bytes_of(idx)}});
      Bytes w = before;
      const size_t rb = row_bytes(ct, c.K);
      for (int64_t t = 0; t < T; ++t) {
        const Bytes e = encoded(std::vector<float>(src.begin() + t * c.K, src.begin() + (t + 1) * c.K));
        std::copy(e.begin(), e.end(), w.begin() + std::ptrdiff_t(size_t(idx[size_t(t)]) * rb));
      }
      want.push_back(w);
    }
    const auto r = test::run_graph(b(), build, in);
    EXPECT_TRUE(test::same_bytes(r[0][0], want[0])) << "K " << c.K;
    EXPECT_TRUE(test::same_bytes(r[1][0], want[1])) << "K " << c.K << ", second run";
  }
  // Read back by get_rows in the same graph (as attention reads the cache).
  const int64_t K = 128, N = 20, T = 3;
  const Builder build = one([&](Graph& g) {
    Tensor* w = g.set_rows(g.input(ct, {K, N}, "cache"), g.input(DType::F32, {K, T}, "src"),
                           g.input(DType::I32, {T}, "idx"));
    return g.scale(g.get_rows(w, g.input(DType::I32, {4}, "ids")), 1.0f);
  });
  WEIR_REQUIRE_SUPPORT(b(), build);
  const std::vector<int32_t> idx = {5, 19, 0}, ids = {19, 5, 1, 0};
  const auto src = randn(size_t(K * T), 9);
  std::vector<double> want(size_t(K) * ids.size(), 0.0);  // row 1: zeros, as the cache was
  for (size_t i = 0; i < ids.size(); ++i)
    for (size_t t = 0; t < idx.size(); ++t)
      if (idx[t] == ids[i]) {
        const std::vector<float> row(src.begin() + int64_t(t) * K, src.begin() + int64_t(t + 1) * K);
        const auto back = cache_of(ct, row).second;
        std::copy(back.begin(), back.end(), want.begin() + std::ptrdiff_t(i * size_t(K)));
      }
  const Inputs in = {{"cache", Bytes(row_bytes(ct, K) * N, 0)}, {"src", bytes_of(src)}, {"idx", bytes_of(idx)},
                     {"ids", bytes_of(ids)}};
  const auto r = test::run_graph(b(), build, {in, in});
  EXPECT_TRUE(near(r[0][0], want, Tol{})) << "read back";
  EXPECT_TRUE(near(r[1][0], want, Tol{})) << "read back, second run";
}

// --- sample --------------------------------------------------------------------

// Temperature 0: the argmax of each row.
TEST_P(Ops, SampleGreedy) {
  const int64_t V = 1000, n = 3;
  const auto l1 = randn(size_t(V * n), 17, 3.0f), l2 = randn(size_t(V * n), 18, 3.0f);
  std::vector<float> params(size_t(5 * n), 0.0f);
  for (int64_t r = 0; r < n; ++r) params[size_t(5 * r + 2)] = 1.0f;  // top_p off
  const Builder build = one([&](Graph& g) {
    return g.sample(g.input(DType::F32, {V, n}, "logits"), g.input(DType::F32, {5, n}, "params"));
  });
  WEIR_REQUIRE_SUPPORT(b(), build);
  auto want = [&](const std::vector<float>& l) {
    std::vector<int32_t> ids;
    for (int64_t r = 0; r < n; ++r)
      ids.push_back(int32_t(std::max_element(l.begin() + r * V, l.begin() + (r + 1) * V) - (l.begin() + r * V)));
    return bytes_of(ids);
  };
  const auto r = test::run_graph(b(), build, {{{"logits", bytes_of(l1)}, {"params", bytes_of(params)}},
                                              {{"logits", bytes_of(l2)}, {"params", bytes_of(params)}}});
  EXPECT_EQ(r[0][0], want(l1));
  EXPECT_EQ(r[1][0], want(l2));
}

// The sampling chain, a row per setting (top-k, top-p, min-p, temperature,
// none; NaN and -inf logits; a row with nothing to draw: -1), against the
// chain written plainly (tests/sample_reference.h).
TEST_P(Ops, SampleFilteredDraws) {
  const int64_t V = 1000;
  // temperature, top_k, top_p, min_p (u drawn below).
  const std::vector<std::array<float, 4>> settings = {
      {0.8f, 40, 0.95f, 0.05f}, {1.0f, 0, 1.0f, 0.0f}, {0.7f, 0, 0.9f, 0.0f}, {1.5f, 0, 1.0f, 0.1f},
      {1.0f, 5, 1.0f, 0.0f},    {0.5f, 1, 1.0f, 0.0f}, {-1.0f, 0, 1.0f, 0.0f}, {2.0f, 3000, 0.5f, 0.0f},
      {1.0f, 0, 1.0f, 0.0f},    {0.9f, 20, 1.0f, 0.0f}};
  const int64_t n = int64_t(settings.size());
  const Builder build = one([&](Graph& g) {
    return g.sample(g.input(DType::F32, {V, n}, "logits"), g.input(DType::F32, {5, n}, "params"));
  });
  WEIR_REQUIRE_SUPPORT(b(), build);
  std::vector<Inputs> in;
  std::vector<std::vector<int32_t>> want;
  std::mt19937 rng(31);
  for (uint32_t run = 0; run < 2; ++run) {
    std::vector<float> l = randn(size_t(V * n), 19 + run, 3.0f);
    l[size_t(1 * V + 7)] = NAN, l[size_t(1 * V + 8)] = -INFINITY;  // row 1: a NaN (as -inf) and a -inf
    l[size_t(4 * V + 3)] = l[size_t(4 * V + 900)] = 20.0f;           // row 4: a tie at the top
    for (int64_t i = 0; i < V; ++i) l[size_t(8 * V + i)] = i % 2 ? -INFINITY : NAN;  // row 8: nothing to draw
    std::vector<float> params;
    for (const auto& s : settings) {
      params.insert(params.end(), s.begin(), s.end());
      params.push_back(std::uniform_real_distribution<float>(0.0f, 1.0f)(rng));
    }
    in.push_back({{"logits", bytes_of(l)}, {"params", bytes_of(params)}});
    std::vector<int32_t> ids;
    for (int64_t r = 0; r < n; ++r)
      ids.push_back(test::reference_sample_row(&l[size_t(r * V)], V, &params[size_t(5 * r)]));
    want.push_back(ids);
  }
  const auto r = test::run_graph(b(), build, in);
  EXPECT_EQ(test::ints_of(r[0][0]), want[0]);
  EXPECT_EQ(test::ints_of(r[1][0]), want[1]) << "second run";
}

// allow_tokens then sample (constrained decoding): random bitmasks (one row
// allowing a single token, one allowing none: -1, one allowing all), the
// masked logits against the mask written plainly, and the draws among the
// allowed tokens against the reference chain on those logits.
TEST_P(Ops, AllowTokensThenSample) {
  const int64_t V = 1000, W = (V + 31) / 32, n = 5;
  const Builder build = [&](Graph& g) {
    Tensor* masked = g.allow_tokens(g.input(DType::F32, {V, n}, "logits"), g.input(DType::I32, {W, n}, "allow"));
    Tensor* ids = g.sample(masked, g.input(DType::F32, {5, n}, "params"));
    return std::vector<Tensor*>{masked, ids};
  };
  WEIR_REQUIRE_SUPPORT(b(), build);
  const std::vector<std::array<float, 4>> settings = {
      {0.8f, 40, 0.95f, 0.05f}, {1.0f, 0, 1.0f, 0.0f}, {-1.0f, 0, 1.0f, 0.0f}, {1.0f, 0, 0.9f, 0.0f}, {0.7f, 5, 1.0f, 0.0f}};
  std::mt19937 rng(41);
  std::vector<Inputs> in;
  std::vector<std::vector<float>> want_logits;
  std::vector<std::vector<int32_t>> want_ids;
  for (uint32_t run = 0; run < 2; ++run) {
    const std::vector<float> l = randn(size_t(V * n), 51 + run, 3.0f);
    std::vector<uint32_t> allow(size_t(W * n));
    for (uint32_t& w : allow) w = uint32_t(rng()) & uint32_t(rng());  // about a quarter allowed
    std::fill_n(allow.begin() + 1 * W, W, 0u);
    allow[size_t(1 * W + 617 / 32)] = 1u << (617 % 32);   // row 1: token 617 alone
    std::fill_n(allow.begin() + 3 * W, W, 0u);            // row 3: nothing
    std::fill_n(allow.begin() + 4 * W, W, ~0u);           // row 4: everything
    std::vector<float> masked(l.size()), params;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t v = 0; v < V; ++v)
        masked[size_t(r * V + v)] = (allow[size_t(r * W + v / 32)] >> (v % 32)) & 1u ? l[size_t(r * V + v)] : -INFINITY;
    for (const auto& s : settings) {
      params.insert(params.end(), s.begin(), s.end());
      params.push_back(std::uniform_real_distribution<float>(0.0f, 1.0f)(rng));
    }
    std::vector<int32_t> ids;
    for (int64_t r = 0; r < n; ++r)
      ids.push_back(test::reference_sample_row(&masked[size_t(r * V)], V, &params[size_t(5 * r)]));
    EXPECT_EQ(ids[1], 617);
    EXPECT_EQ(ids[3], -1);
    in.push_back({{"logits", bytes_of(l)}, {"allow", bytes_of(allow)}, {"params", bytes_of(params)}});
    want_logits.push_back(masked);
    want_ids.push_back(ids);
  }
  const auto r = test::run_graph(b(), build, in);
  for (size_t run = 0; run < 2; ++run) {
    EXPECT_EQ(r[run][0], bytes_of(want_logits[run])) << "run " << run;
    EXPECT_EQ(test::ints_of(r[run][1]), want_ids[run]) << "run " << run;
  }
}

// --- every op ------------------------------------------------------------------

// Where each op of the IR (core/graph.h) is tested on every backend: an op
// added to the IR fails here until it has a test in tests/backends.
TEST(EveryOp, HasATestOnEveryBackend) {
  const std::map<Op, const char*> where = {
      {Op::View, "Ops.RmsNorm, Ops.Rope, CacheOps.Attention (strided views)"},
      {Op::GetRows, "WeightOps.GetRows, Ops.GetRowsOfEveryHalf"},
      {Op::MulMat, "WeightOps.MulMat, Ops.MulMatOfHandQuantizedQ8_0"},
      {Op::RmsNorm, "Ops.RmsNorm"},
      {Op::LayerNorm, "Ops.LayerNorm"},
      {Op::Gelu, "Ops.Gelu"},
      {Op::Mul, "Ops.MulAddAndScaleRoundOnce"},
      {Op::Add, "Ops.MulAddAndScaleRoundOnce"},
      {Op::Scale, "Ops.MulAddAndScaleRoundOnce"},
      {Op::Softcap, "Ops.Softcap"},
      {Op::Rope, "Ops.Rope"},
      {Op::GeluMul, "Ops.GatedUnits"},
      {Op::SiluMul, "Ops.GatedUnits"},
      {Op::SwigluOai, "Ops.SwigluOai"},
      {Op::Attention, "CacheOps.Attention"},
      {Op::SetRows, "CacheOps.SetRows"},
      {Op::Sample, "Ops.SampleGreedy, Ops.SampleFilteredDraws"},
      {Op::AllowTokens, "Ops.AllowTokensThenSample"},
      {Op::AllReduce, "Collectives.AllReduce (collectives_on_every_backend_test.cpp)"},
      {Op::AllGather, "Collectives.AllGather"},
      {Op::TopK, "MoeOps.TopK (moe_ops_on_every_backend_test.cpp)"},
      {Op::MoeWeights, "MoeOps.MoeWeights"},
      {Op::MulMatId, "ExpertOps.MulMatId"},
      {Op::MoeSum, "MoeOps.MoeSum"},
  };
  for (int o = int(Op::Leaf) + 1; o < int(Op::Count); ++o)
    EXPECT_TRUE(where.count(Op(o))) << op_name(Op(o)) << " has no test in tests/backends";
}

INSTANTIATE_TEST_SUITE_P(Backends, Ops, ::testing::ValuesIn(test::backend_names()), test::ParamName());
INSTANTIATE_TEST_SUITE_P(Backends, WeightOps,
                         ::testing::Combine(::testing::ValuesIn(test::backend_names()),
                                            ::testing::ValuesIn(test::weight_types())),
                         test::ParamName());
INSTANTIATE_TEST_SUITE_P(Backends, CacheOps,
                         ::testing::Combine(::testing::ValuesIn(test::backend_names()),
                                            ::testing::Values(DType::F32, DType::F16, DType::Q8_0)),
                         test::ParamName());

}  // namespace
}  // namespace weir
