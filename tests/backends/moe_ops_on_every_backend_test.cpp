// The mixture-of-experts ops on every backend present (CPU exact, chaos,
// CUDA), against float64 implementations written here: top_k, moe_weights,
// mul_mat_id of every weight type (a shared and a per-slot input; decode
// and prefill sizes), moe_sum, and a layer's whole expert FFN. The harness
// and the tolerances are ops_on_every_backend_test.cpp's (op_check.h); the
// CUDA backend's fused expert launches and their knobs stay in
// tests/cuda/backend_ops_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backends/op_check.h"
#include "core/graph.h"

namespace weir {
namespace {

using test::Builder;
using test::bytes_of;
using test::Bytes;
using test::Inputs;
using test::near;
using test::randn;
using test::Tol;

class MoeOps : public test::OnEveryBackend<std::string> {};
class ExpertOps : public test::OnEveryBackend<std::tuple<std::string, DType>> {
 protected:
  DType dtype() const { return std::get<1>(GetParam()); }
};

// k distinct experts of E for each of T tokens, [k, T].
std::vector<int32_t> distinct_experts(int64_t E, int64_t k, int64_t T, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> e(static_cast<size_t>(E));
    std::iota(e.begin(), e.end(), 0);
    std::shuffle(e.begin(), e.end(), rng);
    ids.insert(ids.end(), e.begin(), e.begin() + k);
  }
  return ids;
}

// --- float64 references ------------------------------------------------------

// The k largest of each column of x [E, T], largest first; ties: the lower
// index first; NaN counts as -inf.
std::vector<int32_t> ref_top_k(const std::vector<float>& x, int64_t E, int64_t T, int64_t k) {
  std::vector<int32_t> out;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> idx(static_cast<size_t>(E));
    std::iota(idx.begin(), idx.end(), 0);
    auto v = [&](int32_t i) {
      const double f = x[size_t(t * E + i)];
      return std::isnan(f) ? -INFINITY : f;
    };
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return v(a) > v(b); });
    out.insert(out.end(), idx.begin(), idx.begin() + k);
  }
  return out;
}

// w[j, t] = softmax(logits[:, t])[ids[j, t]], divided by their sum when
// normalize.
std::vector<double> ref_moe_weights(const std::vector<float>& l, const std::vector<int32_t>& ids, int64_t E, int64_t k,
                                    int64_t T, bool normalize) {
  std::vector<double> w(size_t(k * T));
  for (int64_t t = 0; t < T; ++t) {
    double mx = -INFINITY, sum = 0;
    for (int64_t e = 0; e < E; ++e) mx = std::max(mx, double(l[size_t(t * E + e)]));
    for (int64_t e = 0; e < E; ++e) sum += std::exp(l[size_t(t * E + e)] - mx);
    double picked = 0;
    for (int64_t j = 0; j < k; ++j)
      picked += w[size_t(t * k + j)] = std::exp(l[size_t(t * E + ids[size_t(t * k + j)])] - mx) / sum;
    if (normalize)
      for (int64_t j = 0; j < k; ++j) w[size_t(t * k + j)] /= picked;
  }
  return w;
}

// y[:, j, t] = W_e x[:, j', t], e = ids[j, t]; j' = 0 (X 1) or j (X k).
// W as float64 [E][N][K].
std::vector<double> ref_mul_mat_id(const std::vector<double>& W, const std::vector<double>& x,
                                   const std::vector<int32_t>& ids, int64_t K, int64_t N, int64_t k, int64_t X,
                                   int64_t T) {
  std::vector<double> y(size_t(N * k * T));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = ids[size_t(t * k + j)];
      const double* xr = &x[size_t((t * X + (X == 1 ? 0 : j)) * K)];
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t i = 0; i < K; ++i) s += W[size_t((e * N + n) * K + i)] * xr[i];
        y[size_t((t * k + j) * N + n)] = s;
      }
    }
  return y;
}

// out[:, t] = sum over j (in order) of w[j, t] y[:, j, t].
std::vector<double> ref_moe_sum(const std::vector<double>& y, const std::vector<double>& w, int64_t N, int64_t k,
                                int64_t T) {
  std::vector<double> out(size_t(N * T), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j)
      for (int64_t n = 0; n < N; ++n) out[size_t(t * N + n)] += w[size_t(t * k + j)] * y[size_t((t * k + j) * N + n)];
  return out;
}

std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// --- the ops -------------------------------------------------------------------

// top_k alone, and as a layer's routing has it (moe_weights reading the
// same logits and ids: CUDA fuses the two): random logits with a tie, and
// awkward ones: ties, -0 and +0, NaN, -inf; up to 32 picks of 40.
TEST_P(MoeOps, TopK) {
  struct Case {
    int64_t E, k, T;
    std::vector<float> l1, l2;
  };
  std::vector<Case> cases;
  for (int64_t T : {1, 13, 30}) {
    Case c{8, 3, T, randn(size_t(8 * T), 11, 2.0f), randn(size_t(8 * T), 12, 2.0f)};
    c.l1[3] = c.l1[5];  // a tie: the lower index first
    c.l2[size_t(8 * (T - 1) + 6)] = c.l2[size_t(8 * (T - 1) + 1)];
    cases.push_back(c);
  }
  const int64_t E = 40;
  std::vector<float> l = randn(size_t(E * 3), 50);
  l[2] = l[7] = l[33] = 3.0f;
  l[4] = -0.0f, l[5] = 0.0f, l[6] = -0.0f;
  l[9] = std::nanf(""), l[E + 1] = -INFINITY, l[E + 2] = std::nanf("");
  for (int64_t i = 2 * E; i < 3 * E; ++i) l[size_t(i)] = i % 3 ? 0.0f : -INFINITY;
  std::vector<float> l_rev(l.rbegin(), l.rend());
  for (int64_t k : {4, 8, 32}) cases.push_back({E, k, 3, l, l_rev});
  for (const Case& c : cases)
    for (bool routing : {false, true}) {
      const Builder build = [&](Graph& g) {
        Tensor* L = g.input(DType::F32, {c.E, c.T}, "logits");
        Tensor* ids = g.top_k(L, int(c.k));
        std::vector<Tensor*> out = {ids};
        if (routing) out.push_back(g.moe_weights(L, ids, c.k < c.E));
        return out;
      };
      WEIR_REQUIRE_SUPPORT(b(), build);
      const auto r = test::run_graph(b(), build, {{{"logits", bytes_of(c.l1)}}, {{"logits", bytes_of(c.l2)}}});
      const std::string what = "E " + std::to_string(c.E) + " k " + std::to_string(c.k) + " T " +
                               std::to_string(c.T) + (routing ? " with moe_weights" : "");
      EXPECT_EQ(test::ints_of(r[0][0]), ref_top_k(c.l1, c.E, c.T, c.k)) << what;
      EXPECT_EQ(test::ints_of(r[1][0]), ref_top_k(c.l2, c.E, c.T, c.k)) << what << ", second run";
    }
}

TEST_P(MoeOps, MoeWeights) {
  struct Case {
    int64_t E, k, T;
  };
  for (const Case& c : {Case{8, 3, 1}, Case{8, 3, 13}, Case{8, 3, 30}, Case{40, 4, 3}, Case{40, 32, 3}})
    for (bool normalize : {false, true}) {
      const Builder build = [&](Graph& g) {
        return std::vector<Tensor*>{g.moe_weights(g.input(DType::F32, {c.E, c.T}, "logits"),
                                                  g.input(DType::I32, {c.k, c.T}, "ids"), normalize)};
      };
      WEIR_REQUIRE_SUPPORT(b(), build);
      std::vector<Inputs> in;
      std::vector<std::vector<double>> want;
      for (uint32_t run = 0; run < 2; ++run) {
        const auto l = randn(size_t(c.E * c.T), 20 + run, 2.0f);
        const auto ids = distinct_experts(c.E, c.k, c.T, 21 + run);
        in.push_back({{"logits", bytes_of(l)}, {"ids", bytes_of(ids)}});
        want.push_back(ref_moe_weights(l, ids, c.E, c.k, c.T, normalize));
      }
      const auto r = test::run_graph(b(), build, in);
      const std::string what = "E " + std::to_string(c.E) + " k " + std::to_string(c.k) + " T " +
                               std::to_string(c.T) + (normalize ? " normalized" : "");
      EXPECT_TRUE(near(r[0][0], want[0], Tol{1e-6})) << what;
      EXPECT_TRUE(near(r[1][0], want[1], Tol{1e-6})) << what << ", second run";
    }
}

TEST_P(MoeOps, MoeSum) {
  const int64_t N = 64, k = 3;
  for (int64_t T : {1, 13, 30}) {
    const Builder build = [&](Graph& g) {
      return std::vector<Tensor*>{g.moe_sum(g.input(DType::F32, {N, k, T}, "y"), g.input(DType::F32, {k, T}, "w"))};
    };
    WEIR_REQUIRE_SUPPORT(b(), build);
    std::vector<Inputs> in;
    std::vector<std::vector<double>> want;
    for (uint32_t run = 0; run < 2; ++run) {
      const auto y = randn(size_t(N * k * T), 14 + run), w = randn(size_t(k * T), 15 + run);
      in.push_back({{"y", bytes_of(y)}, {"w", bytes_of(w)}});
      want.push_back(ref_moe_sum(as_double(y), as_double(w), N, k, T));
    }
    const auto r = test::run_graph(b(), build, in);
    EXPECT_TRUE(near(r[0][0], want[0], Tol{1e-6})) << "T " << T;
    EXPECT_TRUE(near(r[1][0], want[1], Tol{1e-6})) << "T " << T << ", second run";
  }
}

// The experts' products of every weight type: each token's x (X 1) or a
// slot's own (X k), decode and prefill token counts (3 to 90 pairs).
TEST_P(ExpertOps, MulMatId) {
  const DType wt = dtype();
  const int64_t E = 8, k = 3, K = 256, N = 64;
  const Bytes w = test::random_weights(wt, K, N * E, 16);
  const std::vector<double> wd = test::dequantized(wt, w, K, N * E);
  for (int64_t T : {1, 13, 30})
    for (int64_t X : {int64_t(1), k}) {
      const Builder build = [&](Graph& g) {
        return std::vector<Tensor*>{g.mul_mat_id(g.external(wt, {K, N, E}, const_cast<uint8_t*>(w.data()), "experts"),
                                                 g.input(DType::F32, {K, X, T}, "x"),
                                                 g.input(DType::I32, {k, T}, "ids"))};
      };
      WEIR_REQUIRE_SUPPORT(b(), build);
      std::vector<Inputs> in;
      std::vector<std::vector<double>> want;
      for (uint32_t run = 0; run < 2; ++run) {
        const auto x = randn(size_t(K * X * T), 12 + 10 * run + uint32_t(X));
        const auto ids = distinct_experts(E, k, T, uint32_t(T) + 10 * run);
        in.push_back({{"x", bytes_of(x)}, {"ids", bytes_of(ids)}});
        want.push_back(ref_mul_mat_id(wd, as_double(x), ids, K, N, k, X, T));
      }
      const auto r = test::run_graph(b(), build, in);
      // CUDA: the integer types on 8-bit activations (decode), or fp16 ones
      // (the tensor-core tiles), as its dense products.
      const Tol tol{!cuda() ? 1e-5 : test::cuda_q8_decode(wt) ? 3e-2 : 1e-5};
      const std::string what = "T " + std::to_string(T) + (X == 1 ? ", shared x" : ", a slot's own x");
      EXPECT_TRUE(near(r[0][0], want[0], tol)) << what;
      EXPECT_TRUE(near(r[1][0], want[1], tol)) << what << ", second run";
    }
}

// A layer's FFN as the models build it: router, top-k, weights, gate/up,
// GLU, down, the weighted sum; decode and prefill token counts.
TEST_P(MoeOps, ExpertFfnOfALayer) {
  const int64_t E = 8, k = 3, K = 256, F = 64;
  const Bytes router = test::random_weights(DType::F32, K, E, 21),
              gate = test::random_weights(DType::Q4_K, K, F * E, 22),
              up = test::random_weights(DType::Q4_K, K, F * E, 23),
              down = test::random_weights(DType::Q8_0, F, K * E, 24);
  const auto rd = test::dequantized(DType::F32, router, K, E), gd = test::dequantized(DType::Q4_K, gate, K, F * E),
             ud = test::dequantized(DType::Q4_K, up, K, F * E), dd = test::dequantized(DType::Q8_0, down, F, K * E);
  for (int64_t T : {1, 5, 33}) {
    const Builder build = [&](Graph& g) {
      Tensor* h = g.input(DType::F32, {K, T}, "h");
      Tensor* logits = g.mul_mat(g.external(DType::F32, {K, E}, const_cast<uint8_t*>(router.data()), "router"), h);
      Tensor* ids = g.top_k(logits, int(k));
      Tensor* w = g.moe_weights(logits, ids, true);
      Tensor* x = g.reshape(h, {K, 1, T});
      Tensor* par = g.silu_mul(
          g.mul_mat_id(g.external(DType::Q4_K, {K, F, E}, const_cast<uint8_t*>(gate.data()), "gate"), x, ids),
          g.mul_mat_id(g.external(DType::Q4_K, {K, F, E}, const_cast<uint8_t*>(up.data()), "up"), x, ids));
      Tensor* y = g.mul_mat_id(g.external(DType::Q8_0, {F, K, E}, const_cast<uint8_t*>(down.data()), "down"), par, ids);
      return std::vector<Tensor*>{g.moe_sum(y, w)};
    };
    WEIR_REQUIRE_SUPPORT(b(), build);
    std::vector<Inputs> in;
    std::vector<std::vector<double>> want;
    for (uint32_t run = 0; run < 2; ++run) {
      const auto h = randn(size_t(K * T), 25 + 10 * run + uint32_t(T));
      in.push_back({{"h", bytes_of(h)}});
      const std::vector<double> hd = as_double(h);
      // The router's logits, its picks and their weights in float64. The
      // picks must not hang on a near tie that a float sum could flip.
      std::vector<double> l(size_t(E * T), 0.0);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t e = 0; e < E; ++e)
          for (int64_t i = 0; i < K; ++i) l[size_t(t * E + e)] += rd[size_t(e * K + i)] * hd[size_t(t * K + i)];
      const std::vector<float> lf(l.begin(), l.end());
      const std::vector<int32_t> ids = ref_top_k(lf, E, T, k);
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> col(l.begin() + t * E, l.begin() + (t + 1) * E);
        std::sort(col.rbegin(), col.rend());
        ASSERT_GT(col[size_t(k - 1)] - col[size_t(k)], 1e-3)
            << "token " << t << ": the k-th and next logits nearly tie";
      }
      std::vector<double> wts(size_t(k * T));
      for (int64_t t = 0; t < T; ++t) {
        double mx = -INFINITY, sum = 0, picked = 0;
        for (int64_t e = 0; e < E; ++e) mx = std::max(mx, l[size_t(t * E + e)]);
        for (int64_t e = 0; e < E; ++e) sum += std::exp(l[size_t(t * E + e)] - mx);
        for (int64_t j = 0; j < k; ++j)
          picked += wts[size_t(t * k + j)] = std::exp(l[size_t(t * E + ids[size_t(t * k + j)])] - mx) / sum;
        for (int64_t j = 0; j < k; ++j) wts[size_t(t * k + j)] /= picked;
      }
      const auto g1 = ref_mul_mat_id(gd, hd, ids, K, F, k, 1, T), u1 = ref_mul_mat_id(ud, hd, ids, K, F, k, 1, T);
      std::vector<double> par(g1.size());
      for (size_t i = 0; i < par.size(); ++i) par[i] = g1[i] / (1 + std::exp(-g1[i])) * u1[i];
      want.push_back(ref_moe_sum(ref_mul_mat_id(dd, par, ids, F, K, k, k, T), wts, K, k, T));
    }
    const auto r = test::run_graph(b(), build, in);
    const Tol tol{cuda() ? 3e-2 : 1e-5};
    EXPECT_TRUE(near(r[0][0], want[0], tol)) << "T " << T;
    EXPECT_TRUE(near(r[1][0], want[1], tol)) << "T " << T << ", second run";
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, MoeOps, ::testing::ValuesIn(test::backend_names()), test::ParamName());
INSTANTIATE_TEST_SUITE_P(Backends, ExpertOps,
                         ::testing::Combine(::testing::ValuesIn(test::backend_names()),
                                            ::testing::ValuesIn(test::weight_types())),
                         test::ParamName());

}  // namespace
}  // namespace weir
