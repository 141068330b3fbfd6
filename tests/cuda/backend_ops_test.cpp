// The CUDA backend's own kernels and launches against the CPU backend (the
// reference, in its exact mode: no llama.cpp activation rounding), through
// the Backend interface as a session drives it: plan, copy the inputs in,
// run, copy the result out, wait; a second and third run replay a recorded
// CUDA graph. What each op means is tested on every backend, this one among
// them, against float64 (tests/backends); here: the decode kernels' other
// variants (staged or not), the tile and 8-bit kernels, products on the
// same x in one launch, the experts' kernels and fused launches, the
// rope/norm/GLU/cache-write fusions with the knobs that switch them off and
// the launch counts they save, and graph replay.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/plan/kernel_limits.h"
#include "backend/registry.h"
#include "core/graph.h"
#include "core/half.h"
#include "core/quant/random_blocks.h"
#include "cuda_test_util.h"

namespace weir {
namespace {

// Host data of a graph's input tensors, by the tensor's name.
using Inputs = std::vector<std::pair<std::string, std::vector<uint8_t>>>;

// Builds the graph (external weights point at host memory the test owns)
// and returns the tensor to read back.
using Builder = std::function<Tensor*(Graph&)>;

std::vector<uint8_t> run_on(Backend& b, const Builder& build, const Inputs& inputs, int runs = 1) {
  Graph g;
  Tensor* out = build(g);
  g.mark_output(out);
  b.plan(g);
  std::vector<uint8_t> result(out->n_bytes());
  for (int r = 0; r < runs; ++r) {
    for (Tensor& t : g.tensors())
      for (const auto& [name, data] : inputs)
        if (t.op == Op::Leaf && t.name == name) {
          if (data.size() != t.n_bytes()) throw std::runtime_error("input " + name + ": wrong size");
          b.queue().copy_to_device(t.data, data.data(), data.size());
        }
    b.queue().run(g);
    b.queue().copy_to_host(result.data(), out->data, result.size());
    b.queue().synchronize();
  }
  b.release(g);
  return result;
}

std::vector<uint8_t> floats(std::vector<float> v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}
std::vector<float> as_floats(const std::vector<uint8_t>& b) {
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}
std::vector<uint8_t> ints(const std::vector<int32_t>& v) {
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

// max |gpu - cpu| / max |cpu| over the whole result, and no NaN.
double rel_err(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  double num = 0, den = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (std::isnan(gpu[i]) != std::isnan(cpu[i])) return INFINITY;
    if (std::isnan(cpu[i])) continue;
    num = std::max(num, std::fabs(double(gpu[i]) - double(cpu[i])));
    den = std::max(den, std::fabs(double(cpu[i])));
  }
  return den > 0 ? num / den : num;
}

// Options whose products of 5-8 tokens stay on the decode kernels, as the
// tests of their launches and fusions need (CudaOptions::mma_min_tokens).
CudaOptions decode_options() {
  CudaOptions o;
  o.mma_min_tokens = 9;
  return o;
}

class CudaOps : public testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::test::have_gpu(&why)) GTEST_SKIP() << "no GPU: " << why;
    // The MMA tile kernel's types at 5-8 tokens go to it by default
    // (CudaOptions::mma_min_tokens); these tests hold the decode kernels'
    // launches and fusions there, so they keep them, and mma_ (the
    // defaults) runs the small-batch tiles (MmaTileProducts).
    mma_ = make_cuda_backend(CudaOptions{});
    CudaOptions o = decode_options();
    gpu_ = make_cuda_backend(o);
    // The decode products' other kernels, which the defaults take only for
    // some shapes: staged through shared memory everywhere they can, and
    // never (CudaOptions::staged).
    for (int staged : {1, 0}) {
      o.staged = staged;
      variants_.push_back(make_cuda_backend(o));
    }
    CpuOptions co;
    co.llama_rounding = false;
    cpu_ = std::make_unique<CpuBackend>(2, co);
  }
  // Runs on both backends; the GPU result three times (eager, then a
  // recorded graph twice), with the default options and each variant: the
  // largest error.
  double compare(const Builder& build, const Inputs& in) {
    const auto c = as_floats(run_on(*cpu_, build, in));
    double e = rel_err(as_floats(run_on(*gpu_, build, in, 3)), c);
    for (auto& v : variants_) e = std::max(e, rel_err(as_floats(run_on(*v, build, in, 3)), c));
    return e;
  }
  // The same with the variants alone.
  double compare_variants(const Builder& build, const Inputs& in) {
    const auto c = as_floats(run_on(*cpu_, build, in));
    double e = 0;
    for (auto& v : variants_) e = std::max(e, rel_err(as_floats(run_on(*v, build, in, 3)), c));
    return e;
  }
  std::unique_ptr<Backend> gpu_, cpu_, mma_;
  std::vector<std::unique_ptr<Backend>> variants_;
};

const DType kWeightTypes[] = {DType::F32,  DType::F16,  DType::BF16,   DType::Q4_0,   DType::Q4_1, DType::Q5_0,
                              DType::Q5_1, DType::Q8_0, DType::Q2_K,   DType::Q3_K,   DType::Q4_K, DType::Q5_K,
                              DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS, DType::MXFP4};

// The types whose decode products run on 8-bit activations (ops_mul_mat_q8.cu).
bool is_q8_decode(DType t) {
  return t == DType::Q4_0 || t == DType::Q5_0 || t == DType::Q8_0 || t == DType::Q4_K || t == DType::Q5_K ||
         t == DType::Q6_K || t == DType::IQ4_NL || t == DType::IQ4_XS || t == DType::MXFP4;
}

std::vector<uint8_t> random_weights(DType t, int64_t K, int64_t N, uint64_t seed) {
  std::vector<uint8_t> w(row_bytes(t, K) * size_t(N));
  quant::random_fill(t, w.data(), K * N, 0.0f, 0.05f, seed);
  return w;
}

// The products of every type with the default options, decode and prefill
// sizes, are checked on every backend (tests/backends: WeightOps.MulMat);
// here the decode products' other kernels, which the defaults take only for
// some shapes: staged through shared memory everywhere they can, and never
// (CudaOptions::staged 1, 0). Past 8 tokens (the tile kernels, cuBLAS) the
// variants run what the defaults run.
TEST_F(CudaOps, StagedAndUnstagedDecodeProductsEveryType) {
  for (DType wt : kWeightTypes) {
    const int64_t K = traits(wt).block_size == 256 ? 1024 : 96, N = 67;
    const auto w = random_weights(wt, K, N, 7);
    for (int64_t T : {1, 3, 8}) {
      const Builder b = [&](Graph& g) {
        Tensor* W = g.external(wt, {K, N}, const_cast<uint8_t*>(w.data()), "w");
        return g.mul_mat(W, g.input(DType::F32, {K, T}, "x"));
      };
      const double e = compare_variants(b, {{"x", floats(randn(size_t(K * T), uint32_t(T)))}});
      // 8-bit activations in the integer decode kernels (checked exactly in
      // Q8DecodeProducts).
      EXPECT_LT(e, is_q8_decode(wt) ? 3e-2 : 2e-5) << dtype_name(wt) << " T " << T;
    }
  }
}

// The MMA tile kernel (Q4_0, Q8_0, Q4_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4; K a
// multiple of 256; 5-64 tokens by default, 9-64 on gpu_) against the CPU:
// several 256-row blocks with a ragged last one, each token tile (16: T up
// to 16, 32: up to 32, 64) full and partly empty, several tiles of 64, K
// split or not.
TEST_F(CudaOps, MmaTileProducts) {
  for (DType wt : {DType::Q4_K, DType::Q6_K, DType::Q4_0, DType::Q8_0, DType::IQ4_NL, DType::IQ4_XS, DType::MXFP4}) {
    for (auto [K, N] : {std::pair<int64_t, int64_t>{256, 40}, {2048, 300}, {4096, 520}}) {
      const auto w = random_weights(wt, K, N, 11 + uint64_t(K));
      for (int64_t T : {5, 8, 9, 16, 17, 32, 33, 64, 80}) {
        const Builder b = [&](Graph& g) {
          Tensor* W = g.external(wt, {K, N}, const_cast<uint8_t*>(w.data()), "w");
          return g.mul_mat(W, g.input(DType::F32, {K, T}, "x"));
        };
        const Inputs in = {{"x", floats(randn(size_t(K * T), 5 + uint32_t(T)))}};
        const auto want = as_floats(run_on(*cpu_, b, in));
        // gpu_ and its variants take 5-8 tokens on the 8-bit decode kernels.
        double e = rel_err(as_floats(run_on(*mma_, b, in, 3)), want);
        if (T > cuda::kMaxVecTokens) e = std::max(e, compare(b, in));
        // fp16 x and weights (scales rounded to fp16 first): ~2e-4 here; a
        // wrong scale group or a k-slot out of place gives 1e-1.
        EXPECT_LT(e, 2e-3) << dtype_name(wt) << " K " << K << " N " << N << " T " << T;
        if (T == 64)
          std::printf("[ error  ] MMA tile %s K %lld N %lld T 64: %.2e\n", dtype_name(wt), static_cast<long long>(K),
                      static_cast<long long>(N), e);
      }
    }
  }
}

// The integer decode kernels against the float product of the dequantized
// weights and the activations as the kernels quantize them: per 32 values,
// d = fp16(max |x| / 127), q = round(x / (max |x| / 127)).
// Long rows too: many steps a warp in the register kernels, and (the
// staged variant) the staged kernels with several slices a row and more
// slices than stages.
TEST_F(CudaOps, Q8DecodeProducts) {
  for (DType wt : kWeightTypes)
    for (const int64_t K : {traits(wt).block_size == 256 ? int64_t(768) : int64_t(160), int64_t(14336)}) {
      if (!is_q8_decode(wt)) continue;
      const int64_t N = 45;
      const auto w = random_weights(wt, K, N, 21);
      std::vector<float> wf(size_t(K * N));
      for (int64_t n = 0; n < N; ++n)
        dequantize_row(wt, w.data() + size_t(n) * row_bytes(wt, K), &wf[size_t(n * K)], K);
      for (int64_t T : {1, 2, 5, 8}) {
        const auto x = randn(size_t(K * T), 77 + uint32_t(T));
        std::vector<float> xq(x.size());
        for (size_t b = 0; b < x.size(); b += 32) {
          float amax = 0;
          for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b + i]));
          const float d = amax / 127.0f;
          const float dh = fp16_to_f32(f32_to_fp16(d));
          for (size_t i = 0; i < 32; ++i) xq[b + i] = amax == 0 ? 0.0f : dh * std::nearbyint(x[b + i] / d);
        }
        std::vector<float> want(size_t(N * T));
        for (int64_t t = 0; t < T; ++t)
          for (int64_t n = 0; n < N; ++n) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k) s += double(wf[size_t(n * K + k)]) * xq[size_t(t * K + k)];
            want[size_t(t * N + n)] = float(s);
          }
        const Builder b = [&](Graph& g) {
          return g.mul_mat(g.external(wt, {K, N}, const_cast<uint8_t*>(w.data()), "w"),
                           g.input(DType::F32, {K, T}, "x"));
        };
        const auto got = as_floats(run_on(*gpu_, b, {{"x", floats(x)}}, 2));
        // The kernels take the offset terms from fp16(d * sum q): ~1e-3 of them.
        EXPECT_LT(rel_err(got, want), 2e-3) << dtype_name(wt) << " K " << K << " T " << T;
      }
    }
}

// Products on the same x run as one launch (q, k, v; gate, up): every
// output still matches the CPU, for unequal heights and several tokens.
// The 8-bit decode kernels and the tile kernels; the float decode kernel
// (F16, BF16, Q4_1, Q3_K: up to 8 tokens; more take cuBLAS, a launch each).
TEST_F(CudaOps, ProductsOnTheSameXInOneLaunch) {
  for (DType wt : {DType::Q4_K, DType::Q6_K, DType::Q4_0, DType::Q8_0, DType::F16, DType::BF16, DType::Q4_1,
                   DType::Q3_K, DType::IQ4_NL, DType::IQ4_XS, DType::MXFP4}) {
    const bool vec = !is_q8_decode(wt);
    const int64_t K = 512;
    const int64_t N[3] = {67, 35, 130};
    std::vector<std::vector<uint8_t>> w;
    for (int i = 0; i < 3; ++i) w.push_back(random_weights(wt, K, N[i], 40 + uint64_t(i)));
    for (int64_t T : {1, 2, 3, 8, 20, 64}) {  // decode kernels; the tile kernel
      if (vec && T > 8) continue;
      const auto x = floats(randn(size_t(K * T), 90 + uint32_t(T)));
      std::vector<std::vector<float>> got[2];
      for (int side = 0; side < 2; ++side) {
        Backend& b = side ? *gpu_ : *cpu_;
        Graph g;
        Tensor* xt = g.input(DType::F32, {K, T}, "x");
        Tensor* y[3];
        for (int i = 0; i < 3; ++i) {
          y[i] = g.mul_mat(g.external(wt, {K, N[i]}, w[size_t(i)].data(), "w" + std::to_string(i)), xt);
          g.mark_output(y[i]);
        }
        b.plan(g);
        if (side) {
          EXPECT_EQ(b.stats().planned_launches, 1u) << dtype_name(wt) << " T " << T;
        }
        for (int rep = 0; rep < (side ? 3 : 1); ++rep) {
          b.queue().copy_to_device(xt->data, x.data(), x.size());
          b.queue().run(g);
          got[side].clear();
          for (int i = 0; i < 3; ++i) {
            std::vector<float> v(size_t(N[i] * T));
            b.queue().copy_to_host(v.data(), y[i]->data, v.size() * 4);
            b.queue().synchronize();
            got[side].push_back(v);
          }
        }
        b.release(g);
      }
      for (int i = 0; i < 3; ++i)
        EXPECT_LT(rel_err(got[1][size_t(i)], got[0][size_t(i)]), T > 8 ? 5e-3 : vec ? 2e-5 : 3e-2)
            << dtype_name(wt) << " T " << T << " y" << i;
    }
  }
}

// The experts' 8-bit products against the dense 8-bit decode products of
// the same expert matrix and x (the same 8-bit rounding of x; only the
// order of the float sums differs): every integer type, a block a pair
// and the tiles sorted by expert, shared and per-slot x, an id out of range.
TEST_F(CudaOps, ExpertProductsAgreeWithDenseProducts) {
  CudaOptions o;
  o.tile_mma = false;  // the 8-bit tiles for 80 pairs (ExpertTilesOnTheTensorCores: the MMA tiles)
  auto q8 = make_cuda_backend(o);
  const int64_t E = 6, k = 2, K = 512, N = 96;
  for (DType wt : {DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL,
                   DType::IQ4_XS, DType::MXFP4}) {
    const auto w = random_weights(wt, K, N * E, 31);
    const size_t expert_bytes = row_bytes(wt, K) * size_t(N);
    for (int64_t T : {3, 40}) {  // 6 pairs; 80: sorted, some experts with more than a tile
      std::vector<int32_t> ids(size_t(k * T));
      std::mt19937 rng{uint32_t(T * 7 + 1)};
      for (auto& id : ids) id = int32_t(rng() % E);
      ids[1] = int32_t(E + 3);  // out of range: NaN rows
      for (int64_t X : {int64_t(1), k}) {
        const auto x = randn(size_t(K * X * T), uint32_t(40 + X));
        const Inputs in = {{"x", floats(x)}, {"ids", ints(ids)}};
        const auto got = as_floats(run_on(*q8, [&](Graph& g) {
          return g.mul_mat_id(g.external(wt, {K, N, E}, const_cast<uint8_t*>(w.data()), "experts"),
                              g.input(DType::F32, {K, X, T}, "x"), g.input(DType::I32, {k, T}, "ids"));
        }, in, 2));
        ASSERT_EQ(got.size(), size_t(N * k * T));
        double worst = 0;
        for (int64_t p = 0; p < k * T; ++p) {
          const std::vector<float> got_p(got.begin() + p * N, got.begin() + (p + 1) * N);
          const int32_t e = ids[size_t(p)];
          if (e >= E) {
            for (float v : got_p) ASSERT_TRUE(std::isnan(v)) << dtype_name(wt) << " pair " << p;
            continue;
          }
          const int64_t row = X == 1 ? p / k : p;
          const std::vector<float> xr(x.begin() + row * K, x.begin() + (row + 1) * K);
          const auto want = as_floats(run_on(*gpu_, [&](Graph& g) {
            return g.mul_mat(g.external(wt, {K, N}, const_cast<uint8_t*>(w.data() + size_t(e) * expert_bytes), "W_e"),
                             g.input(DType::F32, {K, 1}, "xr"));
          }, {{"xr", floats(xr)}}));
          worst = std::max(worst, rel_err(got_p, want));
        }
        EXPECT_LT(worst, 1e-5) << dtype_name(wt) << " T " << T << " x rows a token " << X;
      }
    }
  }
}

// Prefill-sized expert products on the tensor cores (an expert's pairs in
// tiles of 64 on the MMA tile kernel) against the dense products of each
// expert over the x rows of its pairs, 9-64 tokens, which take the same
// MMA tile kernel: the same results up to the order of K's partial sums.
TEST_F(CudaOps, ExpertTilesOnTheTensorCores) {
  const int64_t E = 3, k = 2, K = 512, N = 288, T = 40;  // N: a row block and a part
  std::vector<int32_t> ids(size_t(k * T));
  for (int64_t t = 0; t < T; ++t) ids[size_t(k * t)] = int32_t(t % E), ids[size_t(k * t + 1)] = int32_t((t + 1) % E);
  for (DType wt : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
    const auto w = random_weights(wt, K, N * E, 61);
    const size_t expert_bytes = row_bytes(wt, K) * size_t(N);
    for (int64_t X : {int64_t(1), k}) {
      const auto x = randn(size_t(K * X * T), uint32_t(62 + X));
      const auto got = as_floats(run_on(*gpu_, [&](Graph& g) {
        return g.mul_mat_id(g.external(wt, {K, N, E}, const_cast<uint8_t*>(w.data()), "experts"),
                            g.input(DType::F32, {K, X, T}, "x"), g.input(DType::I32, {k, T}, "ids"));
      }, {{"x", floats(x)}, {"ids", ints(ids)}}, 2));
      double worst = 0;
      for (int32_t e = 0; e < E; ++e) {
        std::vector<int64_t> pairs;
        for (int64_t p = 0; p < k * T; ++p)
          if (ids[size_t(p)] == e) pairs.push_back(p);
        ASSERT_GE(pairs.size(), 9u);
        std::vector<float> xe;
        for (int64_t p : pairs) {
          const int64_t row = X == 1 ? p / k : p;
          xe.insert(xe.end(), x.begin() + row * K, x.begin() + (row + 1) * K);
        }
        const int64_t n = int64_t(pairs.size());
        const auto want = as_floats(run_on(*gpu_, [&](Graph& g) {
          return g.mul_mat(g.external(wt, {K, N}, const_cast<uint8_t*>(w.data() + size_t(e) * expert_bytes), "W_e"),
                           g.input(DType::F32, {K, n}, "xe"));
        }, {{"xe", floats(xe)}}));
        for (size_t i = 0; i < pairs.size(); ++i) {
          const std::vector<float> g_p(got.begin() + pairs[i] * N, got.begin() + (pairs[i] + 1) * N);
          const std::vector<float> w_p(want.begin() + int64_t(i) * N, want.begin() + int64_t(i + 1) * N);
          worst = std::max(worst, rel_err(g_p, w_p));
        }
      }
      EXPECT_LT(worst, 1e-5) << dtype_name(wt) << " x rows a token " << X;
    }
  }
}

// Expert rows that end inside a 256-element step (gpt-oss: K 2880 = 11
// steps and 64): the MMA tiles cut the last step at K (x zero-padded, the
// groups past K scaled by 0), against the CPU's float product: fp16 x and
// weights give ~2e-4, a step read past K or a tail dropped ~1e-1.
TEST_F(CudaOps, ExpertTilesWithARowTail) {
  const int64_t E = 3, k = 2, K = 2880, N = 160, T = 40;
  std::vector<int32_t> ids(size_t(k * T));
  for (int64_t t = 0; t < T; ++t) ids[size_t(k * t)] = int32_t(t % E), ids[size_t(k * t + 1)] = int32_t((t + 1) % E);
  for (DType wt : {DType::IQ4_NL, DType::MXFP4}) {
    const auto w = random_weights(wt, K, N * E, 71);
    for (int64_t X : {int64_t(1), k}) {
      const Builder b = [&](Graph& g) {
        return g.mul_mat_id(g.external(wt, {K, N, E}, const_cast<uint8_t*>(w.data()), "experts"),
                            g.input(DType::F32, {K, X, T}, "x"), g.input(DType::I32, {k, T}, "ids"));
      };
      const double e = compare(b, {{"x", floats(randn(size_t(K * X * T), uint32_t(72 + X)))}, {"ids", ints(ids)}});
      EXPECT_LT(e, 2e-3) << dtype_name(wt) << " x rows a token " << X;
      std::printf("[ error  ] MMA experts %s K %lld, x rows a token %lld: %.2e\n", dtype_name(wt),
                  static_cast<long long>(K), static_cast<long long>(X), e);
    }
  }
}

// The experts' fused launches (moe_ops.h) against the same graph with each
// op a launch of its own (CudaOptions::moe_fusions off), both on the 8-bit
// kernels: the routing bit for bit, the FFN up to the order of the weighted
// sum; decode and prefill sizes, gate/up and down of different types.
TEST_F(CudaOps, ExpertLaunchesAgreeWithOneLaunchAnOp) {
  // Both on the 8-bit kernels (prefill sizes would take the MMA tiles where
  // a type has them, and those do not fuse the GLU).
  CudaOptions o;
  o.tile_mma = false;
  auto fused = make_cuda_backend(o);
  o.moe_fusions = false;
  auto apart = make_cuda_backend(o);
  const int64_t E = 40, k = 4, K = 256, F = 256;  // E: a lane holds two values, one lane of them past the end
  const auto router = random_weights(DType::F32, K, E, 51);
  std::vector<float> norm_w = randn(size_t(K), 56);
  {  // the routing of awkward logits: ties, -0 and +0, NaN, -inf; the most picks (32)
    std::vector<float> l = randn(size_t(E * 3), 50);
    l[2] = l[7] = l[33] = 3.0f;
    l[4] = -0.0f, l[5] = 0.0f, l[6] = -0.0f;
    l[9] = std::nanf(""), l[E + 1] = -INFINITY, l[E + 2] = std::nanf("");
    for (int64_t i = 2 * E; i < 3 * E; ++i) l[size_t(i)] = i % 3 ? 0.0f : -INFINITY;
    const Inputs in = {{"l", floats(l)}};
    for (int kk : {int(k), 8, 32}) {
      const Builder route = [&](Graph& g) {
        Tensor* L = g.input(DType::F32, {E, 3}, "l");
        return g.moe_weights(L, g.top_k(L, kk), kk < E);
      };
      // The picks of the fused launch (the weights computed in it too), as
      // floats: the ids' rows of a table whose row e holds e.
      std::vector<float> index(size_t(8 * (E + 1)));
      for (size_t i = 0; i < index.size(); ++i) index[i] = float(i / 8);
      const Builder picks = [&](Graph& g) {
        Tensor* L = g.input(DType::F32, {E, 3}, "l");
        Tensor* ids = g.top_k(L, kk);
        g.moe_weights(L, ids, kk < E);
        return g.get_rows(g.external(DType::F32, {8, E + 1}, index.data(), "index"), g.reshape(ids, {kk * 3}));
      };
      EXPECT_EQ(run_on(*fused, route, in, 3), run_on(*apart, route, in)) << "k " << kk;
      EXPECT_EQ(run_on(*fused, picks, in, 3), run_on(*cpu_, picks, in)) << "k " << kk;
    }
  }
  // (mxfp4 throughout: gpt-oss's experts.)
  for (auto [gt, dt] : {std::pair{DType::Q4_K, DType::Q6_K}, std::pair{DType::Q4_0, DType::Q8_0},
                        std::pair{DType::Q5_K, DType::Q4_K}, std::pair{DType::MXFP4, DType::MXFP4},
                        std::pair{DType::IQ4_XS, DType::IQ4_NL}}) {
    const auto gate = random_weights(gt, K, F * E, 52), up = random_weights(gt, K, F * E, 53),
               down = random_weights(dt, F, K * E, 54);
    for (int64_t T : {1, 4, 9, 33}) {
      auto logits = [&](Graph& g, Tensor* h) {
        return g.mul_mat(g.external(DType::F32, {K, E}, const_cast<uint8_t*>(router.data()), "router"), h);
      };
      const Builder weights = [&](Graph& g) {
        Tensor* l = logits(g, g.input(DType::F32, {K, T}, "h"));
        return g.moe_weights(l, g.top_k(l, int(k)), true);
      };
      // As a layer has it: the FFN's norm first (whose launch then writes
      // the gate/up launch's 8-bit x).
      const Builder ffn = [&](Graph& g) {
        Tensor* h = g.mul(g.rms_norm(g.input(DType::F32, {K, T}, "h"), 1e-6f),
                          g.external(DType::F32, {K}, norm_w.data(), "ffn_norm"));
        Tensor* l = logits(g, h);
        Tensor* ids = g.top_k(l, int(k));
        Tensor* w = g.moe_weights(l, ids, true);
        Tensor* x = g.reshape(h, {K, 1, T});
        Tensor* par = g.silu_mul(
            g.mul_mat_id(g.external(gt, {K, F, E}, const_cast<uint8_t*>(gate.data()), "gate"), x, ids),
            g.mul_mat_id(g.external(gt, {K, F, E}, const_cast<uint8_t*>(up.data()), "up"), x, ids));
        return g.moe_sum(g.mul_mat_id(g.external(dt, {F, K, E}, const_cast<uint8_t*>(down.data()), "down"), par, ids),
                         w);
      };
      const Inputs in = {{"h", floats(randn(size_t(K * T), uint32_t(55 + T)))}};
      EXPECT_EQ(run_on(*fused, weights, in, 3), run_on(*apart, weights, in)) << "routing, T " << T;
      EXPECT_LT(rel_err(as_floats(run_on(*fused, ffn, in, 3)), as_floats(run_on(*apart, ffn, in))), 1e-5)
          << dtype_name(gt) << "/" << dtype_name(dt) << " T " << T;
    }
  }
}

// Runs a graph with several outputs on b (the GPU three times: eager, then
// replays) and returns them.
std::vector<std::vector<float>> run_outputs(Backend& b, const std::function<std::vector<Tensor*>(Graph&)>& build,
                                            const Inputs& inputs, int runs, uint64_t* launches = nullptr) {
  Graph g;
  const std::vector<Tensor*> outs = build(g);
  for (Tensor* o : outs) g.mark_output(o);
  b.plan(g);
  if (launches) *launches = b.stats().planned_launches;
  std::vector<std::vector<float>> got;
  for (int r = 0; r < runs; ++r) {
    for (Tensor& t : g.tensors())
      for (const auto& [name, data] : inputs)
        if (t.op == Op::Leaf && t.name == name) b.queue().copy_to_device(t.data, data.data(), data.size());
    b.queue().run(g);
    got.clear();
    for (Tensor* o : outs) {
      std::vector<float> v(o->n_bytes() / 4);
      b.queue().copy_to_host(v.data(), o->data, o->n_bytes());
      got.push_back(std::move(v));
    }
    b.queue().synchronize();
  }
  b.release(g);
  return got;
}

// The decode pattern of an attention block: q and k roped, k and v written
// into the caches. On the GPU the four are one launch (k's rope writes into
// the cache itself); the caches and q must match the CPU's.
TEST_F(CudaOps, RopesAndCacheWritesInOneLaunch) {
  const int64_t D = 64, Hq = 4, Hkv = 2, T = 2, N = 9;
  for (DType ct : {DType::F16, DType::F32}) {
    const auto build = [&](Graph& g) {
      Tensor* pos = g.input(DType::I32, {T}, "pos");
      Tensor* idx = g.input(DType::I32, {T}, "idx");
      const RopeParams rp{int(D), 10000.0f, 1.0f, RopeMode::Neox, nullptr};
      Tensor* q = g.rope(g.input(DType::F32, {D, Hq, T}, "q"), pos, rp);
      Tensor* k = g.rope(g.input(DType::F32, {D, Hkv, T}, "k"), pos, rp);
      Tensor* kc = g.set_rows(g.input(ct, {D * Hkv, N}, "kc"), g.reshape(k, {D * Hkv, T}), idx);
      Tensor* vc = g.set_rows(g.input(ct, {D * Hkv, N}, "vc"), g.input(DType::F32, {D * Hkv, T}, "v"), idx);
      Tensor* ids = g.input(DType::I32, {3}, "ids");
      return std::vector<Tensor*>{q, g.get_rows(kc, ids), g.get_rows(vc, ids)};
    };
    std::vector<uint8_t> cache(row_bytes(ct, D * Hkv) * N, 0);
    const Inputs in = {{"pos", ints({17, 4000})},
                       {"idx", ints({6, 2})},
                       {"ids", ints({2, 6, 0})},
                       {"q", floats(randn(size_t(D * Hq * T), 31))},
                       {"k", floats(randn(size_t(D * Hkv * T), 32))},
                       {"v", floats(randn(size_t(D * Hkv * T), 33))},
                       {"kc", cache},
                       {"vc", cache}};
    uint64_t launches = 0;
    const auto c = run_outputs(*cpu_, build, in, 1);
    const auto gg = run_outputs(*gpu_, build, in, 3, &launches);
    EXPECT_EQ(launches, 3u) << "rope q, rope k into the cache and set_rows v "
                               "as one launch, then two get_rows";
    for (size_t i = 0; i < c.size(); ++i) EXPECT_LT(rel_err(gg[i], c[i]), 2e-5) << dtype_name(ct) << " output " << i;
  }
}

// qwen3's and gemma3's q and k norms (rms_norm + mul of a head's row) and
// gemma3's q scale run by the rope launch's jobs: one launch for the norms,
// the ropes, the scale and the cache writes; head dims whose pairs are not
// whole warps (48) keep the norm launches.
TEST_F(CudaOps, QkNormsRunInTheRopeLaunch) {
  const int64_t Hq = 4, Hkv = 2, N = 9;
  for (int64_t D : {int64_t(64), int64_t(128), int64_t(48)})
    for (RopeMode mode : {RopeMode::Normal, RopeMode::Neox})
      for (int64_t T : {int64_t(1), int64_t(3)}) {
        const bool scaled = mode == RopeMode::Neox;  // gemma3's q: scaled after its rope, in the same launch
        const std::vector<float> wq = randn(size_t(D), 41), wk = randn(size_t(D), 42);
        const auto build = [&](Graph& g) {
          Tensor* pos = g.input(DType::I32, {T}, "pos");
          Tensor* idx = g.input(DType::I32, {T}, "idx");
          const RopeParams rp{int(D), 1000000.0f, 1.0f, mode, nullptr};
          auto norm = [&](Tensor* x, const std::vector<float>& w, const char* name) {
            return g.mul(g.rms_norm(x, 1e-6f), g.external(DType::F32, {D}, const_cast<float*>(w.data()), name));
          };
          Tensor* q = norm(g.input(DType::F32, {D, Hq, T}, "q"), wq, "q_norm");
          Tensor* k = norm(g.input(DType::F32, {D, Hkv, T}, "k"), wk, "k_norm");
          q = g.rope(q, pos, rp);
          k = g.rope(k, pos, rp);
          if (scaled) q = g.scale(q, 0.0625f);
          Tensor* kc = g.set_rows(g.input(DType::F16, {D * Hkv, N}, "kc"), g.reshape(k, {D * Hkv, T}), idx);
          Tensor* vc = g.set_rows(g.input(DType::F16, {D * Hkv, N}, "vc"), g.input(DType::F32, {D * Hkv, T}, "v"), idx);
          Tensor* ids = g.input(DType::I32, {3}, "ids");
          return std::vector<Tensor*>{q, g.get_rows(kc, ids), g.get_rows(vc, ids)};
        };
        std::vector<uint8_t> cache(row_bytes(DType::F16, D * Hkv) * N, 0);
        const Inputs in = {{"pos", ints(T == 1 ? std::vector<int32_t>{33} : std::vector<int32_t>{17, 4000, 5})},
                           {"idx", ints(T == 1 ? std::vector<int32_t>{6} : std::vector<int32_t>{6, 2, 8})},
                           {"ids", ints({2, 6, 0})},
                           {"q", floats(randn(size_t(D * Hq * T), 43, 3.0f))},
                           {"k", floats(randn(size_t(D * Hkv * T), 44, 3.0f))},
                           {"v", floats(randn(size_t(D * Hkv * T), 45))},
                           {"kc", cache},
                           {"vc", cache}};
        uint64_t launches = 0;
        const auto c = run_outputs(*cpu_, build, in, 1);
        const auto gg = run_outputs(*gpu_, build, in, 3, &launches);
        EXPECT_EQ(launches, D == 48 ? 5u : 3u) << "D " << D << (scaled ? " scaled" : "");
        for (size_t i = 0; i < c.size(); ++i)
          EXPECT_LT(rel_err(gg[i], c[i]), 2e-5) << "D " << D << " T " << T << " output " << i;
      }
}

// gemma3's post-attention norm, the residual add and the next norm (with
// its 8-bit copy for the product after it) in one launch: the sum and the
// last norm against the CPU, and bit for bit against the two launches
// (CudaOptions::norm_chain off); K 100 keeps two launches (no float4 rows).
TEST_F(CudaOps, NormAddNormInOneLaunch) {
  CudaOptions o = decode_options();
  o.norm_chain = false;
  auto apart = make_cuda_backend(o);
  for (int64_t K : {int64_t(640), int64_t(256), int64_t(100)})
    for (bool swapped : {false, true})
      for (int64_t T : {int64_t(1), int64_t(5)}) {
        const std::vector<float> w0 = randn(size_t(K), 71), w1 = randn(size_t(K), 72);
        const auto wq = random_weights(DType::Q8_0, K == 100 ? 128 : K, 64, 73);
        const auto build = [&](Graph& g) {
          Tensor* p = g.input(DType::F32, {K, T}, "p");
          Tensor* x = g.input(DType::F32, {K, T}, "x");
          Tensor* m0 = g.mul(g.rms_norm(p, 1e-6f), g.external(DType::F32, {K}, const_cast<float*>(w0.data()), "w0"));
          Tensor* sa = swapped ? g.add(x, m0) : g.add(m0, x);
          Tensor* h = g.mul(g.rms_norm(sa, 1e-6f), g.external(DType::F32, {K}, const_cast<float*>(w1.data()), "w1"));
          std::vector<Tensor*> out = {sa, h};
          if (K % 32 == 0)  // a product after it: the norm's launch writes its 8-bit x
            out.push_back(g.mul_mat(g.external(DType::Q8_0, {K, 64}, const_cast<uint8_t*>(wq.data()), "wq"), h));
          return out;
        };
        const Inputs in = {{"p", floats(randn(size_t(K * T), 74, 4.0f))}, {"x", floats(randn(size_t(K * T), 75))}};
        uint64_t launches = 0, apart_launches = 0;
        const auto c = run_outputs(*cpu_, build, in, 1);
        const auto gg = run_outputs(*gpu_, build, in, 3, &launches);
        const auto ga = run_outputs(*apart, build, in, 3, &apart_launches);
        if (K % 4 == 0) {
          EXPECT_EQ(launches + 1, apart_launches) << "K " << K;
        }
        for (size_t i = 0; i < 2; ++i) {
          EXPECT_LT(rel_err(gg[i], c[i]), 1e-5) << "K " << K << " T " << T << " output " << i;
          EXPECT_EQ(gg[i], ga[i]) << "K " << K << " T " << T << " output " << i;
        }
        if (gg.size() > 2) {
          EXPECT_EQ(gg[2], ga[2]) << "K " << K << " T " << T << ": the product on the 8-bit copy";
        }
      }
}

// q, k and v products whose results are roped (normal mode) and written
// into the KV caches by the products' own launch: no rope_store launch
// after them (up to 4 tokens; 5, or the neox mode, take one).
TEST_F(CudaOps, ProductsRopeAndWriteTheCacheThemselves) {
  const int64_t D = 64, N = 9;
  // The 8-bit kernels and the float kernel (F16, BF16); and a 1B llama's
  // q/k/v (Q4_0, 3,072 rows of 2,048), whose one-token launch takes one warp
  // a row pair where two would need a second wave of blocks (CudaOptions::one_wave).
  for (DType wt : {DType::Q4_K, DType::Q8_0, DType::F16, DType::BF16, DType::Q4_0})
    for (RopeMode mode : {RopeMode::Normal, RopeMode::Neox})
      for (int64_t T : {int64_t(1), int64_t(3), int64_t(5)}) {
        const bool big = wt == DType::Q4_0;
        const int64_t K = big ? 2048 : 256, Hq = big ? 32 : 4, Hkv = big ? 8 : 2;
        const DType ct = T == 3 ? DType::F32 : DType::F16;
        // v of another type (as Q4_K_M files have it): its product is a launch of its own.
        const DType vt = wt == DType::Q4_K ? DType::Q6_K : wt;
        const auto wq = random_weights(wt, K, D * Hq, 111), wk = random_weights(wt, K, D * Hkv, 112),
                   wv = random_weights(vt, K, D * Hkv, 113);
        const auto build = [&](Graph& g) {
          Tensor* x = g.input(DType::F32, {K, T}, "x");
          Tensor* pos = g.input(DType::I32, {T}, "pos");
          Tensor* idx = g.input(DType::I32, {T}, "idx");
          const RopeParams rp{int(D), 500000.0f, 1.0f, mode, g.input(DType::F32, {D / 2}, "ff")};
          const auto mm = [&](DType t, const std::vector<uint8_t>& w, int64_t rows, const char* name) {
            return g.mul_mat(g.external(t, {K, rows}, const_cast<uint8_t*>(w.data()), name), x);
          };
          // As a model orders them: the products, then the ropes.
          Tensor* q = g.reshape(mm(wt, wq, D * Hq, "wq"), {D, Hq, T});
          Tensor* k = g.reshape(mm(wt, wk, D * Hkv, "wk"), {D, Hkv, T});
          Tensor* v = mm(vt, wv, D * Hkv, "wv");
          q = g.rope(q, pos, rp);
          k = g.rope(k, pos, rp);
          Tensor* kc = g.set_rows(g.input(ct, {D * Hkv, N}, "kc"), g.reshape(k, {D * Hkv, T}), idx);
          Tensor* vc = g.set_rows(g.input(ct, {D * Hkv, N}, "vc"), v, idx);
          Tensor* ids = g.input(DType::I32, {4}, "ids");
          return std::vector<Tensor*>{q, g.get_rows(kc, ids), g.get_rows(vc, ids)};
        };
        std::vector<float> ff(size_t(D / 2));
        for (size_t i = 0; i < ff.size(); ++i) ff[i] = 1.0f + float(i % 5);
        std::vector<uint8_t> cache(row_bytes(ct, D * Hkv) * N, 0);
        const std::vector<int32_t> pos = {17, 4000, 123, 5, 77}, idx = {6, 2, 8, 0, 4};
        const Inputs in = {{"x", floats(randn(size_t(K * T), 121))},
                           {"pos", ints(std::vector<int32_t>(pos.begin(), pos.begin() + T))},
                           {"idx", ints(std::vector<int32_t>(idx.begin(), idx.begin() + T))},
                           {"ids", ints({2, 6, 0, 8})},
                           {"ff", floats(ff)},
                           {"kc", cache},
                           {"vc", cache}};
        uint64_t launches = 0;
        const auto c = run_outputs(*cpu_, build, in, 1);
        const auto gg = run_outputs(*gpu_, build, in, 3, &launches);
        const std::string what = std::string(dtype_name(wt)) + (mode == RopeMode::Normal ? " normal" : " neox") +
                                 " T " + std::to_string(T) + " cache " + dtype_name(ct);
        const bool jobs = mode == RopeMode::Normal && T <= 4;
        const unsigned products = vt == wt ? 1 : 2;
        EXPECT_EQ(launches, products + (jobs ? 2u : 3u)) << "q/k/v (+ropes and cache writes), two get_rows: " << what;
        for (size_t i = 0; i < c.size(); ++i) EXPECT_LT(rel_err(gg[i], c[i]), 3e-2) << what << " output " << i;
      }
}

// qwen2's q, k and v biases: the products' launch (one for the three),
// then one launch that adds the biases, ropes q and k and writes k and v
// into the caches (CudaOptions::rope_fusions; off: an add launch each). Against
// the CPU, with 8-bit and float weights, F16 and F32 caches, 1 to 5 tokens.
TEST_F(CudaOps, BiasesAddedByTheRopeLaunch) {
  const int64_t K = 256, D = 64, Hq = 4, Hkv = 2, N = 9;
  CudaOptions off = decode_options();
  off.rope_fusions = false;
  auto apart = make_cuda_backend(off);
  for (DType wt : {DType::Q4_0, DType::F16})
    for (int64_t T : {int64_t(1), int64_t(3), int64_t(5)}) {
      const DType ct = T == 3 ? DType::F32 : DType::F16;
      const auto wq = random_weights(wt, K, D * Hq, 211), wk = random_weights(wt, K, D * Hkv, 212),
                 wv = random_weights(wt, K, D * Hkv, 213);
      const auto build = [&](Graph& g) {
        Tensor* x = g.input(DType::F32, {K, T}, "x");
        Tensor* pos = g.input(DType::I32, {T}, "pos");
        Tensor* idx = g.input(DType::I32, {T}, "idx");
        const RopeParams rp{int(D), 1000000.0f, 1.0f, RopeMode::Neox, nullptr};
        const auto mm = [&](const std::vector<uint8_t>& w, int64_t rows, const char* name) {
          return g.mul_mat(g.external(wt, {K, rows}, const_cast<uint8_t*>(w.data()), name), x);
        };
        // As qwen2 orders them: the products, then their biases, then the ropes.
        Tensor* q = mm(wq, D * Hq, "wq");
        Tensor* k = mm(wk, D * Hkv, "wk");
        Tensor* v = mm(wv, D * Hkv, "wv");
        q = g.reshape(g.add(q, g.input(DType::F32, {D * Hq}, "bq")), {D, Hq, T});
        k = g.reshape(g.add(k, g.input(DType::F32, {D * Hkv}, "bk")), {D, Hkv, T});
        v = g.add(v, g.input(DType::F32, {D * Hkv}, "bv"));
        q = g.rope(q, pos, rp);
        k = g.rope(k, pos, rp);
        Tensor* kc = g.set_rows(g.input(ct, {D * Hkv, N}, "kc"), g.reshape(k, {D * Hkv, T}), idx);
        Tensor* vc = g.set_rows(g.input(ct, {D * Hkv, N}, "vc"), v, idx);
        Tensor* ids = g.input(DType::I32, {4}, "ids");
        return std::vector<Tensor*>{q, g.get_rows(kc, ids), g.get_rows(vc, ids)};
      };
      std::vector<uint8_t> cache(row_bytes(ct, D * Hkv) * N, 0);
      const std::vector<int32_t> pos = {17, 4000, 123, 5, 77}, idx = {6, 2, 8, 0, 4};
      const Inputs in = {{"x", floats(randn(size_t(K * T), 221))},
                         {"bq", floats(randn(size_t(D * Hq), 222))},
                         {"bk", floats(randn(size_t(D * Hkv), 223))},
                         {"bv", floats(randn(size_t(D * Hkv), 224))},
                         {"pos", ints(std::vector<int32_t>(pos.begin(), pos.begin() + T))},
                         {"idx", ints(std::vector<int32_t>(idx.begin(), idx.begin() + T))},
                         {"ids", ints({2, 6, 0, 8})},
                         {"kc", cache},
                         {"vc", cache}};
      uint64_t launches = 0, launches_apart = 0;
      const auto c = run_outputs(*cpu_, build, in, 1);
      const auto gg = run_outputs(*gpu_, build, in, 3, &launches);
      const auto ga = run_outputs(*apart, build, in, 3, &launches_apart);
      const std::string what = std::string(dtype_name(wt)) + " T " + std::to_string(T) + " cache " + dtype_name(ct);
      EXPECT_EQ(launches, 4u) << "q/k/v, biases + ropes + cache writes, two get_rows: " << what;
      EXPECT_EQ(launches_apart, 7u) << "and an add launch a bias: " << what;
      for (size_t i = 0; i < c.size(); ++i) {
        EXPECT_LT(rel_err(gg[i], c[i]), 3e-2) << what << " output " << i;
        // The same additions, then the same ropes: bit for bit the separate launches'.
        EXPECT_EQ(0, std::memcmp(gg[i].data(), ga[i].data(), gg[i].size() * 4)) << what << " output " << i;
      }
    }
}

// A norm (with the residual add) or a GLU hands its result to the product
// after it as 8-bit blocks: no launch quantizes x. Up to 4 tokens the GLU
// runs in the gate/up launch (op_mul_mat_glu), past that in a kernel of its
// own.
TEST_F(CudaOps, NormAndGluQuantizeForTheNextProduct) {
  for (DType wt : {DType::Q4_K, DType::Q8_0, DType::Q6_K, DType::IQ4_XS, DType::MXFP4})
    for (Op act : {Op::SiluMul, Op::GeluMul})
      for (int64_t T : {int64_t(1), int64_t(2), int64_t(5)}) {
        const int64_t K = 512, F = 768;
        const auto wg = random_weights(wt, K, F, 51), wu = random_weights(wt, K, F, 52),
                   wd = random_weights(wt, F, K, 53);
        const auto build = [&](Graph& g) {
          Tensor* s = g.add(g.input(DType::F32, {K, T}, "x"), g.input(DType::F32, {K, T}, "r"));
          Tensor* cur = g.mul(g.rms_norm(s, 1e-6f), g.input(DType::F32, {K}, "wn"));
          // Models make the two products in either order (argument evaluation).
          Tensor *gate, *up;
          if (T == 2) {
            up = g.mul_mat(g.external(wt, {K, F}, const_cast<uint8_t*>(wu.data()), "wu"), cur);
            gate = g.mul_mat(g.external(wt, {K, F}, const_cast<uint8_t*>(wg.data()), "wg"), cur);
          } else {
            gate = g.mul_mat(g.external(wt, {K, F}, const_cast<uint8_t*>(wg.data()), "wg"), cur);
            up = g.mul_mat(g.external(wt, {K, F}, const_cast<uint8_t*>(wu.data()), "wu"), cur);
          }
          Tensor* h = act == Op::SiluMul ? g.silu_mul(gate, up) : g.gelu_mul(gate, up);
          Tensor* y = g.mul_mat(g.external(wt, {F, K}, const_cast<uint8_t*>(wd.data()), "wd"), h);
          return std::vector<Tensor*>{y, s};
        };
        const Inputs in = {{"x", floats(randn(size_t(K * T), 61))},
                           {"r", floats(randn(size_t(K * T), 62))},
                           {"wn", floats(randn(size_t(K), 63))}};
        uint64_t launches = 0;
        const auto c = run_outputs(*cpu_, build, in, 1);
        const auto gg = run_outputs(*gpu_, build, in, 3, &launches);
        const std::string what = std::string(dtype_name(wt)) + " " + op_name(act) + " T " + std::to_string(T);
        const unsigned n = T <= 4 ? 3u : 4u;
        EXPECT_EQ(launches, n) << "add+norm+mul, gate/up (+glu), [glu], down: " << what;
        EXPECT_EQ(gpu_->stats().recorded_nodes, n) << what;
        EXPECT_LT(rel_err(gg[0], c[0]), 3e-2) << what;
        EXPECT_LT(rel_err(gg[1], c[1]), 1e-6) << what;
      }
}

// The float decode kernel (F16, BF16) applies the GLU in the gate/up launch
// up to 4 tokens (two launches: gate/up+GLU, down); 5 tokens take the GLU
// kernel (three). Silu and gelu; the GLU's result (an output here) and the
// down product against the CPU.
TEST_F(CudaOps, FloatProductsApplyTheGluInTheirLaunch) {
  const int64_t K = 256, F = 200;
  for (DType wt : {DType::F16, DType::BF16})
    for (Op act : {Op::SiluMul, Op::GeluMul})
      for (int64_t T : {int64_t(1), int64_t(3), int64_t(5)}) {
        const auto wg = random_weights(wt, K, F, 61), wu = random_weights(wt, K, F, 62), wd = random_weights(wt, F, K, 63);
        const auto build = [&](Graph& g) {
          Tensor* x = g.input(DType::F32, {K, T}, "x");
          Tensor* gate = g.mul_mat(g.external(wt, {K, F}, const_cast<uint8_t*>(wg.data()), "wg"), x);
          Tensor* up = g.mul_mat(g.external(wt, {K, F}, const_cast<uint8_t*>(wu.data()), "wu"), x);
          Tensor* h = act == Op::SiluMul ? g.silu_mul(gate, up) : g.gelu_mul(gate, up);
          Tensor* y = g.mul_mat(g.external(wt, {F, K}, const_cast<uint8_t*>(wd.data()), "wd"), h);
          return std::vector<Tensor*>{y, h};
        };
        const Inputs in = {{"x", floats(randn(size_t(K * T), 71))}};
        uint64_t launches = 0;
        const auto c = run_outputs(*cpu_, build, in, 1);
        const auto gg = run_outputs(*gpu_, build, in, 3, &launches);
        const std::string what = std::string(dtype_name(wt)) + " " + op_name(act) + " T " + std::to_string(T);
        EXPECT_EQ(launches, T <= 4 ? 2u : 3u) << "gate/up (+glu), [glu], down: " << what;
        EXPECT_LT(rel_err(gg[1], c[1]), 1e-4) << "h: " << what;
        EXPECT_LT(rel_err(gg[0], c[0]), 1e-4) << "y: " << what;
      }
}

// The residual norm folded into the products around it (mul_mat_q8.h): a
// product -> add -> norm -> mul -> products chain runs as two launches, no
// norm kernel, for up to 4 tokens (5 takes the norm kernel); two layers'
// worth, so the second fold reuses the memory of the first. The 8-bit
// kernels and the float kernel (F16, BF16).
TEST_F(CudaOps, NormFoldedIntoTheProductsAroundIt) {
  // The folding launches of few blocks and long rows (K 256, F 8192: 8
  // blocks, 256 chunks a row) take the split kernel (clusters of 2 blocks a
  // row group, Hopper; 4 chunks a step) or the deep one; also run on the
  // plain one (CudaOptions::add_norm_split_k 0, add_norm_deep off). The folds (up to
  // 4 tokens) also run split everywhere (short rows leave blocks with no
  // chunk): one token with 2 and 4 chunks a step at one block an SM and 1
  // at two, 3 tokens with 2 at one.
  CudaOptions od = decode_options(), os = od, osd = od, os2 = od;
  od.add_norm_deep = false;
  od.add_norm_split_k = 0;
  os.add_norm_split_k = 2;
  os.add_norm_deep = false;
  osd.add_norm_split_k = 2;
  os2.add_norm_split_k = 3;
  auto plain = make_cuda_backend(od), split = make_cuda_backend(os), split_deep = make_cuda_backend(osd),
       split_two = make_cuda_backend(os2);
  Backend* const backends[] = {gpu_.get(), plain.get(), split.get(), split_deep.get(), split_two.get()};
  const char* const names[] = {"", " (plain)", " (split)", " (split, deep)", " (split, two an SM)"};
  // Short rows, and long ones (5632 = 22 x 256: several steps a warp, q6_K
  // rows not 16-byte aligned).
  for (const auto& [K, F] : {std::pair<int64_t, int64_t>{512, 768}, {1024, 5632}, {256, 8192}})
    for (DType wt : {DType::Q4_K, DType::Q6_K, DType::Q4_0, DType::Q8_0, DType::F16, DType::BF16})
      for (int64_t T : {int64_t(1), int64_t(3), int64_t(5)}) {
        const int64_t N = 96;
        // The float kernel's fold (F16, BF16): x stays F32, no quantization of a.
        const bool q8 = is_q8_decode(wt);
        const auto wa = random_weights(wt, F, K, 91), wg = random_weights(wt, K, F, 92),
                   wu = random_weights(wt, K, F, 93), wd = random_weights(wt, F, K, 94),
                   wo = random_weights(wt, K, N, 95);
        // A second reader of x2 of another type: a launch of its own (as v
        // is in Q4_K_M files), reading the same fold.
        const DType ot = !q8 ? (wt == DType::F16 ? DType::BF16 : DType::F16)
                         : wt == DType::Q8_0 ? DType::Q4_0
                                             : DType::Q8_0;
        const auto wo2 = random_weights(ot, K, N, 96);
        const auto w = [](DType t, int64_t k, int64_t n, const std::vector<uint8_t>& v, Graph& g, const char* name) {
          return g.external(t, {k, n}, const_cast<uint8_t*>(v.data()), name);
        };
        const auto build = [&](Graph& g) {
          // The add's operands both ways round: the product first, then second.
          Tensor* s1 = g.add(g.input(DType::F32, {K, T}, "r"),
                             g.mul_mat(w(wt, F, K, wa, g, "wa"), g.input(DType::F32, {F, T}, "a")));
          Tensor* x1 = g.mul(g.rms_norm(s1, 1e-5f), g.input(DType::F32, {K}, "wn1"));
          Tensor* gate = g.mul_mat(w(wt, K, F, wg, g, "wg"), x1);
          Tensor* up = g.mul_mat(w(wt, K, F, wu, g, "wu"), x1);
          Tensor* s2 = g.add(g.mul_mat(w(wt, F, K, wd, g, "wd"), g.silu_mul(gate, up)), s1);
          Tensor* x2 = g.mul(g.rms_norm(s2, 1e-5f), g.input(DType::F32, {K}, "wn2"));
          Tensor* o = g.mul_mat(w(wt, K, N, wo, g, "wo"), x2);
          Tensor* o2 = g.mul_mat(w(ot, K, N, wo2, g, "wo2"), x2);
          // T 3: s2 not an output, read by its norm alone (as the last
          // layer's is): the float kernel's products read it all the same.
          if (T == 3) return std::vector<Tensor*>{o, s1, o2};
          return std::vector<Tensor*>{o, s1, o2, s2};
        };
        const Inputs in = {{"a", floats(randn(size_t(F * T), 101))},
                           {"r", floats(randn(size_t(K * T), 102))},
                           {"wn1", floats(randn(size_t(K), 103))},
                           {"wn2", floats(randn(size_t(K), 104))}};
        const auto c = run_outputs(*cpu_, build, in, 1);
        for (int kernels = 0; kernels < 5; ++kernels) {
          if ((kernels == 1 && F != 8192) || (kernels >= 2 && T > 4)) continue;
          Backend& gpu = *backends[kernels];
          uint64_t launches = 0;
          const auto gg = run_outputs(gpu, build, in, 3, &launches);
          const std::string what = std::string(dtype_name(wt)) + " K " + std::to_string(K) + " F " + std::to_string(F) +
                                   " T " + std::to_string(T) + names[kernels];
          const bool fold = T <= 4;
          // T <= 4: the GLU in the gate/up launch too, which reads the fold.
          EXPECT_EQ(launches, fold ? 5u : 8u)
              << "wa (+add+norm+mul), gate/up (+glu), [glu], wd (+add+norm+mul), wo, wo2: " << what;
          EXPECT_EQ(gpu.stats().recorded_nodes, (fold ? 5u : 8u) + (q8 ? 1u : 0u))
              << "and one quantization of a (8-bit): " << what;
          EXPECT_LT(rel_err(gg[0], c[0]), 5e-2) << "o: " << what;
          EXPECT_LT(rel_err(gg[1], c[1]), 3e-2) << "s1: " << what;
          EXPECT_LT(rel_err(gg[2], c[2]), 5e-2) << "o2: " << what;
          if (T != 3) {
            EXPECT_LT(rel_err(gg[3], c[3]), 3e-2) << "s2: " << what;
          }
        }
      }
}

// Attention hands its output to the product after it (the o-projection) as
// 8-bit blocks: the kernel that merges the key splits writes them (long
// spans), or the attention kernel itself (one split): 3 and 2 kernels, where
// the product quantizing x itself made 4 and 3.
TEST_F(CudaOps, AttentionQuantizesForTheProductAfterIt) {
  const int64_t D = 128, Hq = 8, Hkv = 2, N = 96;
  const auto wo = random_weights(DType::Q4_K, D * Hq, N, 71);
  for (int64_t S : {int64_t(24), int64_t(2048)})
    for (int64_t T : {int64_t(1), int64_t(3)}) {
      const auto build = [&](Graph& g) {
        Tensor* att = g.attention(g.input(DType::F32, {D, Hq, T}, "q"), g.input(DType::F32, {D, Hkv, S}, "k"),
                                  g.input(DType::F32, {D, Hkv, S}, "v"), g.input(DType::F32, {S, T}, "mask"),
                                  1.0f / std::sqrt(float(D)));
        Tensor* y = g.mul_mat(g.external(DType::Q4_K, {D * Hq, N}, const_cast<uint8_t*>(wo.data()), "wo"), att);
        return std::vector<Tensor*>{y, att};
      };
      std::vector<float> mask(size_t(S * T));
      for (int64_t t = 0; t < T; ++t)  // causal: token t sees keys up to S - T + t
        for (int64_t j = 0; j < S; ++j) mask[size_t(t * S + j)] = j <= S - T + t ? 0.0f : -INFINITY;
      const Inputs in = {{"q", floats(randn(size_t(D * Hq * T), 81))},
                         {"k", floats(randn(size_t(D * Hkv * S), 82))},
                         {"v", floats(randn(size_t(D * Hkv * S), 83))},
                         {"mask", floats(mask)}};
      const auto c = run_outputs(*cpu_, build, in, 1);
      const auto gg = run_outputs(*gpu_, build, in, 3);
      EXPECT_EQ(gpu_->stats().recorded_nodes, S > 64 ? 3u : 2u) << "S " << S << " T " << T;
      EXPECT_LT(rel_err(gg[1], c[1]), 1e-4) << "attention, S " << S << " T " << T;
      EXPECT_LT(rel_err(gg[0], c[0]), 3e-2) << "product, S " << S << " T " << T;
    }
}

TEST_F(CudaOps, ReplayFollowsNewInputs) {
  const int64_t K = 64, T = 2;
  const auto w = random_weights(DType::Q4_K, 256, 40, 11);
  Graph g;
  Tensor* x = g.input(DType::F32, {256, T}, "x");
  Tensor* y = g.mul_mat(g.external(DType::Q4_K, {256, 40}, const_cast<uint8_t*>(w.data()), "w"), x);
  g.mark_output(y);
  gpu_->plan(g);
  std::vector<float> prev;
  for (int r = 0; r < 4; ++r) {
    const auto xv = randn(size_t(256 * T), 100 + uint32_t(r));
    gpu_->queue().copy_to_device(x->data, xv.data(), xv.size() * 4);
    gpu_->queue().run(g);
    std::vector<float> out(size_t(40 * T));
    gpu_->queue().copy_to_host(out.data(), y->data, out.size() * 4);
    gpu_->queue().synchronize();
    EXPECT_NE(out, prev) << "run " << r;
    prev = out;
  }
  EXPECT_EQ(gpu_->stats().graphs_captured, 1u);
  EXPECT_EQ(gpu_->stats().graphs_replayed, 3u);
  gpu_->release(g);
  (void)K;
}

}  // namespace
}  // namespace weir
