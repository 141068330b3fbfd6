// Micro-benchmarks of the CPU kernels: timings printed, nothing asserted
// (speed belongs here, not in the test suite; `make test` does not run
// this). Run: build/microbench/weir_microbench [--gtest_filter=Cpu*]
#include <gtest/gtest.h>

#include "host_tensor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/amx.h"
#include "backend/cpu/amx_product.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ops_dequant.h"
#include "backend/cpu/ops_simd.h"
#include "backend/cpu/qdot_k.h"
#include "backend/cpu/repack.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/quant/block_formats.h"
#include "core/quant/quantize_blocks.h"
#include "core/quant/random_blocks.h"
#include "core/tensor.h"

namespace weir::cpu {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

using test::host_tensor;

std::vector<float> randn(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Weight rows of type t: small scales, any quants (the values do not matter
// to the speed).
std::vector<uint8_t> random_weights(DType t, int64_t K, int64_t N, uint64_t seed) {
  std::vector<uint8_t> w(row_bytes(t, K) * size_t(N));
  quant::random_fill(t, w.data(), K * N, 0.0f, 1.0f, seed);
  return w;
}

// The mul_mat op on nth threads (threads started per call, as the op sees
// them in a pool's job).
void run_threads(const Tensor& y, int nth, std::vector<Scratch>& scratch) {
  std::vector<std::thread> th;
  for (int i = 1; i < nth; ++i) th.emplace_back([&, i] { op_mul_mat(y, OpContext{i, nth, &scratch[size_t(i)]}); });
  op_mul_mat(y, OpContext{0, nth, &scratch[0]});
  for (auto& t : th) t.join();
}

// Gemma 3 270M's FFN up-projection at a 512-token prefill and at decode;
// its output matrix's share at decode.
TEST(CpuMulMat, GemmaShapes) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  auto time_it = [&](DType dt, int64_t K, int64_t N, int64_t T, int reps, int nth) {
    std::mt19937 rng(6);
    std::vector<uint8_t> w = random_weights(dt, K, N, 6);
    std::vector<float> x = randn(size_t(K * T), rng), y(size_t(N * T));
    Tensor W = host_tensor(dt, {K, N}, w.data(), "w"), X = host_tensor(DType::F32, {K, T}, x.data(), "x"),
           Y = host_tensor(DType::F32, {N, T}, y.data(), "y");
    Y.op = Op::MulMat;
    Y.src[0] = &W;
    Y.src[1] = &X;
    std::vector<Scratch> scratch(static_cast<size_t>(nth));
    run_threads(Y, nth, scratch);  // warm up scratch and caches
    const auto t0 = Clock::now();
    for (int r = 0; r < reps; ++r) run_threads(Y, nth, scratch);
    const double s = seconds_since(t0) / reps;
    std::printf("mul_mat %s K=%lld N=%lld T=%lld threads=%d isa=%s: %.3f ms, %.1f GFLOP/s, W read %.1f GB/s\n",
                dtype_name(dt), (long long)K, (long long)N, (long long)T, nth, simd::isa_name(simd::active_isa()),
                s * 1e3, 2.0 * double(K) * double(N) * double(T) / s * 1e-9, double(w.size()) / s * 1e-9);
  };
  time_it(DType::Q5_0, 640, 2048, 512, 3, 1);
  if (hw > 1) time_it(DType::Q5_0, 640, 2048, 512, 3, int(hw));
  time_it(DType::Q5_0, 640, 2048, 1, 200, 1);
  time_it(DType::Q4_K, 2048, 640, 1, 200, 1);
  time_it(DType::Q8_0, 640, 262144 / 8, 1, 20, 1);
  if (hw > 1) time_it(DType::Q8_0, 640, 262144 / 8, 1, 20, int(hw));
}

// The integer path (x quantized to 8 bits) against the float path (x
// rounded floats), one thread, best of 7; and Gemma 3 270M's matrices at a
// 128-token prefill, with the time one layer's matrices take per token.
TEST(CpuMulMat, IntegerPathVsFloatPath) {
  struct Shape {
    DType t;
    int64_t K, N, T;
    double per_layer;  // such matrices in one Gemma 3 270M layer (0: not a layer shape)
  };
  const Shape shapes[] = {{DType::Q8_0, 640, 65536, 1, 0},  {DType::Q5_0, 640, 2048, 1, 0},
                          {DType::Q5_0, 640, 2048, 128, 2}, {DType::Q5_0, 640, 1024, 128, 1},
                          {DType::Q5_0, 640, 256, 128, 1},  {DType::Q8_0, 640, 256, 128, 1},
                          {DType::Q4_K, 1024, 640, 128, 1}, {DType::Q4_K, 2048, 640, 128, 0.5},
                          {DType::Q6_K, 2048, 640, 128, 0.5}};
  std::mt19937 rng(9);
  double layer_s = 0;
  for (const Shape& s : shapes) {
    std::vector<uint8_t> w = random_weights(s.t, s.K, s.N, 9);
    Tensor W = host_tensor(s.t, {s.K, s.N}, w.data(), "w");
    std::vector<float> x = randn(size_t(s.K * s.T), rng), xr(x.size());
    const size_t arow = act_row_bytes(s.t, s.K);
    std::vector<uint8_t> xq(arow * size_t(s.T));
    for (int64_t t = 0; t < s.T; ++t) {
      round_activations(s.t, &x[size_t(t * s.K)], &xr[size_t(t * s.K)], s.K);
      quantize_act(activation_type(s.t), &x[size_t(t * s.K)], &xq[size_t(t) * arow], s.K);
    }
    Tensor Xr = host_tensor(DType::F32, {s.K, s.T}, xr.data()), Xq = host_tensor(activation_type(s.t), {s.K, s.T}, xq.data());
    std::vector<float> y(size_t(s.N * s.T));
    Tensor Y = host_tensor(DType::F32, {s.N, s.T}, y.data());
    Y.op = Op::MulMat;
    Y.src[0] = &W;
    Scratch scratch;
    auto best = [&](Tensor* x_in) {
      Y.src[1] = x_in;
      double b = 1e30;
      for (int rep = 0; rep < 7; ++rep) {
        const auto t0 = Clock::now();
        op_mul_mat(Y, OpContext{0, 1, &scratch});
        b = std::min(b, seconds_since(t0));
      }
      return b;
    };
    const double tf = best(&Xr), tq = best(&Xq);
    layer_s += tq * s.per_layer / double(s.T);
    std::printf("%s K %lld N %lld T %lld: float %.3f ms, integer %.3f ms (x%.2f), %.1f GMAC/s, %.1f GB/s of W\n",
                dtype_name(s.t), (long long)s.K, (long long)s.N, (long long)s.T, tf * 1e3, tq * 1e3, tf / tq,
                double(s.K) * double(s.N) * double(s.T) / tq * 1e-9, double(w.size()) / tq * 1e-9);
  }
  std::printf("one layer's matrices at T 128: %.1f us per token (18 layers: %.0f tokens/s, matrices only, 1 thread)\n",
              layer_s * 1e6, 1.0 / (18 * layer_s));
}

// One prefill attention of Gemma 3 270M's shape (D 256, 4 query heads on 1
// kv head, 512 tokens from position 0, F16 cache), one thread, best of 5.
TEST(CpuAttention, GemmaPrefill) {
  const int64_t D = 256, Hq = 4, Hkv = 1, T = 512, S = 512, Hall = Hq + 2 * Hkv;
  std::mt19937 rng(15);
  std::vector<float> qkv = randn(size_t(D * Hall * T), rng), out(size_t(D * Hq * T));
  std::vector<uint16_t> kc(size_t(D * Hkv * S)), vc(kc.size());
  for (std::vector<uint16_t>* c : {&kc, &vc})
    for (uint16_t& h : *c) h = f32_to_fp16(std::normal_distribution<float>(0.0f, 1.5f)(rng));
  std::vector<float> mask(size_t(S * T), 0.0f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = t + 1; j < S; ++j) mask[size_t(t * S + j)] = -INFINITY;
  Tensor q = host_tensor(DType::F32, {D, Hq, T}, qkv.data(), "q");
  q.nb[2] = size_t(D * Hall) * 4;
  q.nb[3] = q.nb[2] * size_t(T);
  Tensor k = host_tensor(DType::F16, {D, Hkv, S}, kc.data(), "k_cache"), v = host_tensor(DType::F16, {D, Hkv, S}, vc.data(), "v_cache");
  Tensor m = host_tensor(DType::F32, {S, T}, mask.data(), "mask"), o = host_tensor(DType::F32, {D * Hq, T}, out.data(), "attn");
  o.op = Op::Attention;
  o.src[0] = &q;
  o.src[1] = &k;
  o.src[2] = &v;
  o.src[3] = &m;
  o.fparams[0] = 1.0f / std::sqrt(float(D));
  Scratch scratch;
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    op_attention(o, OpContext{0, 1, &scratch});
    best = std::min(best, seconds_since(t0));
  }
  std::printf("attention D 256, 4 q heads, 512 tokens, f16 cache: %.2f ms per layer\n", best * 1e3);
}

// K-quant integer dots: GB/s of weight bytes held in cache (L2), one thread,
// each SIMD level this CPU has, against dequantize-then-float-dot.
TEST(CpuQDotK, Throughput) {
  constexpr int64_t kQK = quant::kQK_K;
  const int64_t n = 2048, rows = 64;
  for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const std::vector<uint8_t> w = random_weights(t, n, rows, 5);
    std::mt19937 rng(6);
    std::vector<float> x = randn(size_t(4 * n), rng, 2.0f);
    std::vector<uint8_t> a(4 * (n / kQK) * sizeof(quant::BlockQ8_K));
    quant::quantize_q8_K(x.data(), a.data(), 4 * (n / kQK));
    const size_t wrow = row_bytes(t, n), arow = (n / kQK) * sizeof(quant::BlockQ8_K);
    auto gbs = [&](auto&& body) {
      double best = 1e30;
      for (int rep = 0; rep < 5; ++rep) {
        const auto t0 = Clock::now();
        for (int it = 0; it < 20; ++it) body();
        best = std::min(best, seconds_since(t0) / 20);
      }
      return double(wrow * rows) / best / 1e9;
    };
    volatile float sink = 0;
    std::vector<float> wf(static_cast<size_t>(n * rows)), af(static_cast<size_t>(n));
    dequantize_row(DType::Q8_K, a.data(), af.data(), n);
    char line[512];
    int len = std::snprintf(line, sizeof line, "%s: dequant only %.2f, dequant+float dot %.2f", dtype_name(t),
                            gbs([&] { dequantize_rows(t, w.data(), wrow, rows, n, wf.data(), n); }), gbs([&] {
                              dequantize_rows(t, w.data(), wrow, rows, n, wf.data(), n);
                              for (int64_t r = 0; r < rows; ++r) {
                                float s[8] = {};
                                for (int64_t i = 0; i < n; i += 8)
                                  for (int k = 0; k < 8; ++k) s[k] += wf[size_t(r * n + i + k)] * af[size_t(i + k)];
                                sink = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
                              }
                            }));
    for (SimdLevel l : {SimdLevel::Reference, SimdLevel::AVX2, SimdLevel::AVX512, SimdLevel::AVX512_VNNI}) {
      const QDotKernels k = qdot_k_kernels(t, l);
      if (!k || int(l) > int(hardware_simd_level())) continue;
      float y[16];
      len += std::snprintf(line + len, sizeof line - size_t(len), " | %s dot %.2f tile4x4 %.2f", simd_level_name(l),
                           gbs([&] {
                             for (int64_t r = 0; r < rows; ++r) sink = k.dot(n, &w[size_t(r) * wrow], a.data());
                           }),
                           gbs([&] {
                             for (int64_t r = 0; r < rows; r += 4)
                               k.tile(n, &w[size_t(r) * wrow], wrow, 4, a.data(), arow, 4, y, 4);
                           }));
    }
    std::printf("%s GB/s\n", line);
  }
}

}  // namespace
}  // namespace weir::cpu

namespace weir::cpu {
namespace {

// A repacked layout (repack.h) against the file layout's tile, at a prefill
// tile (8 tokens) and at decode (1 token), at the best SIMD level and at
// AVX2: multiply-adds a second on one thread (GMAC/s), weights of type t
// hot in L2 as mul_mat_q's chunks keep them.
void repack_throughput(DType t, int64_t K, int64_t N) {
  const std::vector<uint8_t> w = random_weights(t, K, N, 3);
  const size_t wrow = row_bytes(t, K);
  std::vector<uint8_t> packed(repacked_group_bytes(t, K) * size_t(N / kRepackRows));
  repack_groups(t, w.data(), wrow, K, N, 0, N / kRepackRows, packed.data());
  std::mt19937 rng(4);
  const std::vector<float> x = randn(size_t(8 * K), rng, 2.0f);
  const DType at = activation_type(t);
  const size_t arow = row_bytes(at, K);
  std::vector<uint8_t> a(8 * arow);
  for (int j = 0; j < 8; ++j) quantize_act(at, &x[size_t(j * K)], &a[size_t(j) * arow], K);
  std::vector<float> y(size_t(8 * N));
  const int64_t chunk = 80;  // rows a call, about mul_mat_q's L2 chunks (192 KiB of Q4_0)
  std::vector<SimdLevel> levels{best_simd_level()};
  if (best_simd_level() != SimdLevel::AVX2) levels.push_back(SimdLevel::AVX2);
  for (SimdLevel level : levels)
  for (int nr : {8, 1}) {
    auto gmacs = [&](auto&& body) {
      double best = 1e30;
      for (int rep = 0; rep < 5; ++rep) {
        const auto t0 = Clock::now();
        for (int it = 0; it < 20; ++it) body();
        best = std::min(best, seconds_since(t0) / 20);
      }
      return double(K) * double(N) * nr / best / 1e9;
    };
    const QDotKernels file = qdot_kernels(t, level);
    const RepackedTileFn rep = repacked_tile(t, level);
    const double f = gmacs([&] {
      for (int64_t r = 0; r < N; r += chunk) file.tile(K, &w[size_t(r) * wrow], wrow, int(chunk), a.data(), arow, nr, &y[size_t(r)], size_t(N));
    });
    const size_t gb = repacked_group_bytes(t, K);
    const double p = gmacs([&] {
      for (int64_t r = 0; r < N; r += chunk)
        rep(K, &packed[size_t(r / kRepackRows) * gb], gb, int(chunk / kRepackRows), a.data(), arow, nr, &y[size_t(r)], size_t(N));
    });
    std::printf("%s %d token(s), %s: file layout %.1f GMAC/s, repacked x8 %.1f GMAC/s (%.2fx)\n", dtype_name(t), nr,
                simd_level_name(level), f, p, p / f);
  }
}

TEST(CpuRepack, Q4_0Throughput) { repack_throughput(DType::Q4_0, 4096, 320); }  // 720 KiB of weights
TEST(CpuRepack, Q5_0Throughput) { repack_throughput(DType::Q5_0, 4096, 320); }  // 880 KiB
TEST(CpuRepack, Q4_KThroughput) { repack_throughput(DType::Q4_K, 4096, 320); }  // 720 KiB
TEST(CpuRepack, Q5_KThroughput) { repack_throughput(DType::Q5_K, 4096, 320); }  // 880 KiB
TEST(CpuRepack, Q6_KThroughput) { repack_throughput(DType::Q6_K, 4096, 320); }  // 1050 KiB
TEST(CpuRepack, Q8_0Throughput) { repack_throughput(DType::Q8_0, 4096, 320); }  // 1360 KiB

}  // namespace
}  // namespace weir::cpu

namespace weir::cpu {
namespace {

// Where one thread's share of an AMX prefill product goes (an 8B's
// 14336 x 4096 gate/up at 512 tokens on 16 threads: 896 rows): building the
// panels, the tile products, storing the result. Skipped without AMX.
TEST(CpuAmx, ProductParts) {
  if (!amx_support().usable() || !amx_support().bf16) GTEST_SKIP() << "AMX: " << amx_support().describe();
  const int64_t K = 4096, N = 896, T = 512, kb = 2048;
  const DType t = DType::Q4_K;
  const size_t rb = row_bytes(t, K);
  std::vector<uint8_t> w(rb * size_t(N));
  for (int64_t r = 0; r < N; ++r) quant::random_fill(t, w.data() + size_t(r) * rb, K, 0.0f, 0.05f, uint64_t(r));
  std::vector<uint16_t> packed(amx_packed_bytes(T, K) / 2);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(K));
  for (int64_t j = 0; j < T; ++j) {
    for (float& v : x) v = nd(rng);
    amx_pack_token(x.data(), K, j, packed.data());
  }
  std::vector<uint16_t> panels(size_t(4 * 32 * kb));
  std::vector<float> acc(4 * amx_accumulator_floats(T)), y(size_t(T * N));
  const uint16_t* pp[4];
  float* cc[4];
  for (int p = 0; p < 4; ++p) {
    pp[p] = panels.data() + size_t(p * 32 * kb);
    cc[p] = acc.data() + size_t(p) * amx_accumulator_floats(T);
  }
  auto ms = [](auto f) {
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = Clock::now();
      f();
      best = std::min(best, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    return best;
  };
  const double build = ms([&] {
    for (int64_t g = 0; g < N; g += 128)
      for (int64_t k0 = 0; k0 < K; k0 += kb)
        for (int p = 0; p < 4; ++p)
          amx_build_panel(t, w.data() + size_t(g + 32 * p) * rb, rb, 32, k0, kb, const_cast<uint16_t*>(pp[p]));
  });
  const double tiles = ms([&] {
    for (int64_t g = 0; g < N; g += 128)
      for (int64_t k0 = 0; k0 < K; k0 += kb) amx_accumulate(pp, 4, kb, packed.data(), K / 32, k0 / 32, T, cc, k0 == 0);
  });
  const double store = ms([&] {
    for (int64_t g = 0; g < N; g += 128)
      for (int p = 0; p < 4; ++p) amx_store_result(cc[p], T, 32, y.data() + g + 32 * p, size_t(N));
  });
  const double whole = ms([&] {
    amx_product_rows(t, w.data(), rb, N, K, packed.data(), T, y.data(), size_t(N), 0, N);
  });
  const double macs = double(N) * double(K) * double(T);
  std::printf("AMX product, one thread, q4_K %ldx%ld by %ld tokens: panels %.2f ms, tiles %.2f ms (%.0f GMAC/s), "
              "store %.2f ms; whole %.2f ms (%.0f GMAC/s)\n",
              long(N), long(K), long(T), build, tiles, macs / tiles / 1e6, store, whole, macs / whole / 1e6);
  // The tiles alone with the panels and activations in L1/L2 (one step's
  // worth of K again and again): the kernel's own ceiling.
  const double hot = ms([&] {
    for (int i = 0; i < 16; ++i) amx_accumulate(pp, 1, 512, packed.data(), K / 32, 0, 64, cc, i == 0);
  });
  std::printf("AMX tiles hot (1 panel, 512 of K, 64 tokens, 16 times): %.3f ms, %.0f GMAC/s\n", hot,
              16.0 * 32 * 512 * 64 / hot / 1e6);
}

}  // namespace
}  // namespace weir::cpu
