// One op suite on every backend present: the CPU (exact mode), the chaos
// backend (tests/chaos: late commands, memory apart, poison), and the CUDA
// backend on a GPU host. Each test drives the backend as a session does
// (plan, copy the inputs in through the queue, run, copy the result out,
// wait; twice, with new inputs the second time) and compares with a plain
// float64 implementation of the op written here, never with the code under
// test. Tolerances are per backend: the CUDA backend rounds activations to
// 8 bits in its decode products and to fp16 in its tile and cuBLAS paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/registry.h"
#include "backends/named_backends.h"
#include "chaos/chaos_backend.h"
#include "core/graph.h"
#include "core/half.h"
#include "core/quant/dequantize.h"
#include "core/quant/random_blocks.h"
#include "q8_blocks.h"

namespace weir {
namespace {

using Inputs = std::vector<std::pair<std::string, std::vector<uint8_t>>>;
using Builder = std::function<Tensor*(Graph&)>;

std::vector<uint8_t> bytes_of(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}
std::vector<uint8_t> bytes_of(const std::vector<int32_t>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}
std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The backends under test, by name.
std::unique_ptr<Backend> make(const std::string& name) { return test::make_named_backend(name, 100); }

// Runs the graph twice through the queue, the second time on `second`
// inputs (a replayed plan must follow them); returns both results.
std::pair<std::vector<uint8_t>, std::vector<uint8_t>> run_twice(Backend& b, const Builder& build, const Inputs& first,
                                                                const Inputs& second) {
  Graph g;
  Tensor* out = build(g);
  g.mark_output(out);
  b.plan(g);
  std::vector<uint8_t> r[2];
  for (int k = 0; k < 2; ++k) {
    for (Tensor& t : g.tensors())
      for (const auto& [name, data] : k == 0 ? first : second)
        if (t.op == Op::Leaf && t.name == name) {
          EXPECT_EQ(data.size(), t.n_bytes()) << name;
          b.queue().copy_to_device(t.data, data.data(), std::min(data.size(), t.n_bytes()));
        }
    b.queue().run(g);
    r[k].resize(out->n_bytes());
    b.queue().copy_to_host(r[k].data(), out->data, r[k].size());
    b.queue().synchronize();
  }
  b.release(g);
  return {r[0], r[1]};
}

// max |got - want| / max |want|; a NaN counts as infinitely wrong.
double rel_err(const std::vector<uint8_t>& got_bytes, const std::vector<double>& want) {
  std::vector<float> got(got_bytes.size() / 4);
  std::memcpy(got.data(), got_bytes.data(), got.size() * 4);
  if (got.size() != want.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num = std::max(num, std::fabs(double(got[i]) - want[i]));
    den = std::max(den, std::fabs(want[i]));
  }
  return den > 0 ? num / den : num;
}

class Ops : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "cuda" && cuda_devices().empty()) GTEST_SKIP() << "no GPU";
    b_ = make(GetParam());
  }
  bool cuda() const { return GetParam() == "cuda"; }
  // Checks both runs against their references.
  void check(const Builder& build, const Inputs& in1, const std::vector<double>& want1, const Inputs& in2,
             const std::vector<double>& want2, double tol, const std::string& what) {
    const auto [r1, r2] = run_twice(*b_, build, in1, in2);
    EXPECT_LT(rel_err(r1, want1), tol) << what << " (first run)";
    EXPECT_LT(rel_err(r2, want2), tol) << what << " (second run, new inputs)";
  }
  std::unique_ptr<Backend> b_;
};

// --- float64 references -------------------------------------------------------

std::vector<double> deq(DType t, const std::vector<uint8_t>& w, int64_t K, int64_t N) {
  std::vector<float> f(size_t(K * N));
  for (int64_t n = 0; n < N; ++n) dequantize_row(t, w.data() + size_t(n) * row_bytes(t, K), f.data() + n * K, K);
  return {f.begin(), f.end()};
}

std::vector<double> ref_mul_mat(const std::vector<double>& w, const std::vector<float>& x, int64_t K, int64_t N,
                                int64_t T) {
  std::vector<double> y(size_t(N * T));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += w[size_t(n * K + k)] * double(x[size_t(t * K + k)]);
      y[size_t(t * N + n)] = s;
    }
  return y;
}

std::vector<double> ref_rms_norm(const std::vector<float>& x, int64_t K, double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / size_t(K); ++r) {
    double ss = 0;
    for (int64_t k = 0; k < K; ++k) ss += double(x[r * size_t(K) + size_t(k)]) * x[r * size_t(K) + size_t(k)];
    const double s = 1.0 / std::sqrt(ss / double(K) + eps);
    for (int64_t k = 0; k < K; ++k) y[r * size_t(K) + size_t(k)] = x[r * size_t(K) + size_t(k)] * s;
  }
  return y;
}

// --- the ops ----------------------------------------------------------------

TEST_P(Ops, MulMatEveryWeightType) {
  for (DType wt : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K,
                   DType::Q5_K, DType::Q3_K}) {
    const int64_t K = traits(wt).block_size == 256 ? 512 : 128, N = 37;
    std::vector<uint8_t> w(row_bytes(wt, K) * size_t(N));
    quant::random_fill(wt, w.data(), K * N, 0.0f, 0.05f, 11);
    const std::vector<double> wd = deq(wt, w, K, N);
    for (int64_t T : {1, 4, 40}) {
      const auto x1 = randn(size_t(K * T), 1), x2 = randn(size_t(K * T), 2);
      const Builder b = [&](Graph& g) {
        return g.mul_mat(g.external(wt, {K, N}, w.data(), "w"), g.input(DType::F32, {K, T}, "x"));
      };
      const bool q8 = wt != DType::F32 && wt != DType::F16 && wt != DType::BF16;
      const double tol = !cuda() ? 1e-5 : T <= 8 ? (q8 ? 3e-2 : 2e-5) : 5e-3;
      check(b, {{"x", bytes_of(x1)}}, ref_mul_mat(wd, x1, K, N, T), {{"x", bytes_of(x2)}},
            ref_mul_mat(wd, x2, K, N, T), tol, std::string(dtype_name(wt)) + " T " + std::to_string(T));
    }
  }
}

TEST_P(Ops, GetRowsOfWeights) {
  for (DType wt : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_K}) {
    const int64_t K = 256, N = 20;
    std::vector<uint8_t> w(row_bytes(wt, K) * size_t(N));
    quant::random_fill(wt, w.data(), K * N, 0.0f, 1.0f, 5);
    const std::vector<double> wd = deq(wt, w, K, N);
    auto want = [&](const std::vector<int32_t>& ids) {
      std::vector<double> y;
      for (int32_t id : ids) y.insert(y.end(), wd.begin() + id * K, wd.begin() + (id + 1) * K);
      return y;
    };
    const std::vector<int32_t> a = {3, 0, 19, 3}, c = {7, 7, 1, 12};
    const Builder b = [&](Graph& g) {
      return g.get_rows(g.external(wt, {K, N}, w.data(), "table"), g.input(DType::I32, {4}, "ids"));
    };
    check(b, {{"ids", bytes_of(a)}}, want(a), {{"ids", bytes_of(c)}}, want(c), 1e-6, dtype_name(wt));
  }
}

TEST_P(Ops, NormAndElementwise) {
  const int64_t K = 300, R = 5;
  const auto x1 = randn(size_t(K * R), 3), x2 = randn(size_t(K * R), 4), w = randn(size_t(K), 5);
  std::vector<float> wv = w;
  // rms_norm(x) * w + x, scaled: a norm, a broadcast mul, an add, a scale.
  const Builder b = [&](Graph& g) {
    Tensor* x = g.input(DType::F32, {K, R}, "x");
    Tensor* n = g.mul(g.rms_norm(x, 1e-5f), g.external(DType::F32, {K}, wv.data(), "w"));
    return g.scale(g.add(n, x), 0.5f);
  };
  auto want = [&](const std::vector<float>& x) {
    std::vector<double> y = ref_rms_norm(x, K, 1e-5);
    for (size_t i = 0; i < y.size(); ++i) y[i] = (y[i] * w[i % size_t(K)] + x[i]) * 0.5;
    return y;
  };
  check(b, {{"x", bytes_of(x1)}}, want(x1), {{"x", bytes_of(x2)}}, want(x2), 2e-6, "norm, mul, add, scale");
}

TEST_P(Ops, GatedUnits) {
  const int64_t K = 256, R = 3;
  const auto a1 = randn(size_t(K * R), 6), b1 = randn(size_t(K * R), 7), a2 = randn(size_t(K * R), 8);
  for (bool silu : {true, false}) {
    const Builder b = [&](Graph& g) {
      Tensor* a = g.input(DType::F32, {K, R}, "a");
      Tensor* c = g.input(DType::F32, {K, R}, "b");
      return silu ? g.silu_mul(a, c) : g.gelu_mul(a, c);
    };
    auto want = [&](const std::vector<float>& a) {
      std::vector<double> y(a.size());
      for (size_t i = 0; i < a.size(); ++i) {
        const double x = a[i];
        const double f = silu ? x / (1 + std::exp(-x))
                              : 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * x * (1 + 0.044715 * x * x)));
        y[i] = f * b1[i];
      }
      return y;
    };
    // gelu: fp16 as llama.cpp's table gives it (~1e-3 relative).
    check(b, {{"a", bytes_of(a1)}, {"b", bytes_of(b1)}}, want(a1), {{"a", bytes_of(a2)}, {"b", bytes_of(b1)}},
          want(a2), silu ? 2e-6 : 2e-3, silu ? "silu_mul" : "gelu_mul");
  }
}

TEST_P(Ops, RopeBothModes) {
  const int64_t D = 64, H = 3, T = 5;
  const auto x1 = randn(size_t(D * H * T), 9), x2 = randn(size_t(D * H * T), 10);
  const std::vector<int32_t> p1 = {0, 1, 2, 7, 100}, p2 = {5, 6, 7, 8, 9};
  for (RopeMode mode : {RopeMode::Neox, RopeMode::Normal}) {
    RopeParams rp;
    rp.n_rot = 48;
    rp.base = 10000.0f;
    rp.freq_scale = 0.5f;
    rp.mode = mode;
    const Builder b = [&](Graph& g) {
      return g.rope(g.input(DType::F32, {D, H, T}, "x"), g.input(DType::I32, {T}, "pos"), rp);
    };
    auto want = [&](const std::vector<float>& x, const std::vector<int32_t>& pos) {
      std::vector<double> y(x.begin(), x.end());
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < rp.n_rot / 2; ++i) {
            const double theta = rp.freq_scale * pos[size_t(t)] * std::pow(double(rp.base), -2.0 * double(i) / rp.n_rot);
            const size_t base = size_t((t * H + h) * D);
            const size_t ia = base + size_t(mode == RopeMode::Neox ? i : 2 * i);
            const size_t ib = base + size_t(mode == RopeMode::Neox ? i + rp.n_rot / 2 : 2 * i + 1);
            const double a = x[ia], c = x[ib];
            y[ia] = a * std::cos(theta) - c * std::sin(theta);
            y[ib] = a * std::sin(theta) + c * std::cos(theta);
          }
      return y;
    };
    check(b, {{"x", bytes_of(x1)}, {"pos", bytes_of(p1)}}, want(x1, p1), {{"x", bytes_of(x2)}, {"pos", bytes_of(p2)}},
          want(x2, p2), 2e-5, mode == RopeMode::Neox ? "neox" : "normal");
  }
}

TEST_P(Ops, AttentionWithMaskAndGroupedHeads) {
  const int64_t D = 64, Hq = 4, Hkv = 2, T = 3, S = 40;
  for (DType kv : {DType::F32, DType::F16, DType::Q8_0}) {
    // K and V as the cache holds them (f16 rounded, or 8-bit blocks), then
    // the reference reads them back.
    auto cache = [&](uint32_t seed) {
      const auto f = randn(size_t(D * Hkv * S), seed);
      std::vector<uint8_t> b(size_t(D * Hkv * S) * (kv == DType::F16 ? 2 : 4));
      std::vector<double> back(f.size());
      if (kv == DType::Q8_0) b = test::q8_0_encode(f);
      for (size_t i = 0; i < f.size(); ++i) {
        if (kv == DType::Q8_0) {
          back[i] = test::q8_0_at(b.data(), int64_t(i));
          continue;
        }
        if (kv == DType::F16) {
          const uint16_t h = f32_to_fp16(f[i]);
          std::memcpy(b.data() + 2 * i, &h, 2);
          back[i] = fp16_to_f32(h);
        } else {
          std::memcpy(b.data() + 4 * i, &f[i], 4);
          back[i] = f[i];
        }
      }
      return std::make_pair(b, back);
    };
    const auto [kb, kd] = cache(11);
    const auto [vb, vd] = cache(12);
    std::vector<uint8_t> kmem = kb, vmem = vb;
    std::vector<float> mask(size_t(S * T), 0.0f);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 30 + t + 1; j < S; ++j) mask[size_t(t * S + j)] = -INFINITY;
    const auto q1 = randn(size_t(D * Hq * T), 13), q2 = randn(size_t(D * Hq * T), 14);
    const float scale = 0.125f;
    const Builder b = [&](Graph& g) {
      Tensor* q = g.input(DType::F32, {D, Hq, T}, "q");
      Tensor* k = g.input(kv, {D, Hkv, S}, "k");
      Tensor* v = g.input(kv, {D, Hkv, S}, "v");
      return g.attention(q, k, v, g.input(DType::F32, {S, T}, "mask"), scale);
    };
    auto want = [&](const std::vector<float>& q) {
      std::vector<double> y(size_t(D * Hq * T));
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < Hq; ++h) {
          const int64_t g = h / (Hq / Hkv);
          std::vector<double> s(static_cast<size_t>(S));
          double mx = -INFINITY;
          for (int64_t j = 0; j < S; ++j) {
            double d = 0;
            for (int64_t i = 0; i < D; ++i) d += q[size_t((t * Hq + h) * D + i)] * kd[size_t((j * Hkv + g) * D + i)];
            s[size_t(j)] = d * scale + mask[size_t(t * S + j)];
            mx = std::max(mx, s[size_t(j)]);
          }
          double sum = 0;
          for (double& e : s) sum += e = std::exp(e - mx);
          for (int64_t i = 0; i < D; ++i) {
            double o = 0;
            for (int64_t j = 0; j < S; ++j) o += s[size_t(j)] / sum * vd[size_t((j * Hkv + g) * D + i)];
            y[size_t(t * D * Hq + h * D + i)] = o;
          }
        }
      return y;
    };
    const Inputs common = {{"k", kmem}, {"v", vmem}, {"mask", bytes_of(mask)}};
    Inputs in1 = common, in2 = common;
    in1.push_back({"q", bytes_of(q1)});
    in2.push_back({"q", bytes_of(q2)});
    check(b, in1, want(q1), in2, want(q2), cuda() ? 5e-3 : 1e-5, dtype_name(kv));
  }
}

TEST_P(Ops, SetRowsIntoTheCache) {
  const int64_t K = 96, N = 10, T = 3;
  for (DType dt : {DType::F32, DType::F16, DType::Q8_0}) {
    const auto src1 = randn(size_t(K * T), 15), src2 = randn(size_t(K * T), 16);
    const std::vector<int32_t> i1 = {9, 0, 4}, i2 = {1, 2, 3};
    // The cache: an input here (zeros), written by set_rows; read back whole.
    std::vector<uint8_t> zeros(row_bytes(dt, K * N), 0);
    const Builder b = [&](Graph& g) {
      Tensor* cache = g.input(dt, {K, N}, "cache");
      return g.set_rows(cache, g.input(DType::F32, {K, T}, "src"), g.input(DType::I32, {T}, "idx"));
    };
    auto want = [&](const std::vector<float>& s, const std::vector<int32_t>& idx) {
      std::vector<double> y(size_t(K * N), 0.0);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t k = 0; k < K; ++k) {
          const float v = s[size_t(t * K + k)];
          y[size_t(idx[size_t(t)] * K + k)] = dt == DType::F16 ? double(fp16_to_f32(f32_to_fp16(v))) : double(v);
        }
      if (dt == DType::Q8_0)  // rows as the format's blocks hold them
        for (int64_t t = 0; t < T; ++t) {
          const auto q = test::q8_0_encode(std::vector<float>(s.begin() + t * K, s.begin() + (t + 1) * K));
          for (int64_t k = 0; k < K; ++k) y[size_t(idx[size_t(t)] * K + k)] = test::q8_0_at(q.data(), k);
        }
      return y;
    };
    const auto [r1, r2] = run_twice(*b_, b, {{"cache", zeros}, {"src", bytes_of(src1)}, {"idx", bytes_of(i1)}},
                                    {{"cache", zeros}, {"src", bytes_of(src2)}, {"idx", bytes_of(i2)}});
    // Back to floats for the comparison.
    auto floats = [&](const std::vector<uint8_t>& r) {
      std::vector<uint8_t> f(size_t(K * N) * 4);
      for (int64_t i = 0; i < K * N; ++i) {
        float v;
        if (dt == DType::Q8_0) {
          v = test::q8_0_at(r.data(), i);
        } else if (dt == DType::F16) {
          uint16_t h;
          std::memcpy(&h, r.data() + 2 * i, 2);
          v = fp16_to_f32(h);
        } else {
          std::memcpy(&v, r.data() + 4 * i, 4);
        }
        std::memcpy(f.data() + 4 * i, &v, 4);
      }
      return f;
    };
    EXPECT_EQ(rel_err(floats(r1), want(src1, i1)), 0.0) << dtype_name(dt);
    EXPECT_EQ(rel_err(floats(r2), want(src2, i2)), 0.0) << dtype_name(dt);
  }
}

TEST_P(Ops, GreedySample) {
  const int64_t V = 1000, n = 3;
  auto logits = [&](uint32_t seed) { return randn(size_t(V * n), seed, 3.0f); };
  const auto l1 = logits(17), l2 = logits(18);
  std::vector<float> params(size_t(5 * n), 0.0f);  // temperature 0: argmax
  for (int64_t r = 0; r < n; ++r) params[size_t(5 * r + 2)] = 1.0f;  // top_p off
  const Builder b = [&](Graph& g) {
    return g.sample(g.input(DType::F32, {V, n}, "logits"), g.input(DType::F32, {5, n}, "params"));
  };
  auto want = [&](const std::vector<float>& l) {
    std::vector<int32_t> ids;
    for (int64_t r = 0; r < n; ++r)
      ids.push_back(int32_t(std::max_element(l.begin() + r * V, l.begin() + (r + 1) * V) - (l.begin() + r * V)));
    return bytes_of(ids);
  };
  const auto [r1, r2] =
      run_twice(*b_, b, {{"logits", bytes_of(l1)}, {"params", bytes_of(params)}},
                {{"logits", bytes_of(l2)}, {"params", bytes_of(params)}});
  EXPECT_EQ(r1, want(l1));
  EXPECT_EQ(r2, want(l2));
}

INSTANTIATE_TEST_SUITE_P(Backends, Ops, ::testing::Values("cpu", "chaos", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace weir
