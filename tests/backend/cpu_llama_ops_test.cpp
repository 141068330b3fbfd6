// Kernels the Llama family added: rope in Normal (adjacent pair) mode and
// with frequency factors, against a closed form in double; silu_mul's vector
// kernel (every SIMD family, odd sizes, several thread splits) against the
// plain formula and against double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ops_simd.h"
#include "core/tensor.h"
#include "host_tensor.h"

namespace weir::cpu {
namespace {

using test::host_tensor;

void run(void (*op)(const Tensor&, const OpContext&), const Tensor& dst, int nth) {
  std::vector<Scratch> scratch(static_cast<size_t>(nth));
  for (int ith = 0; ith < nth; ++ith) op(dst, OpContext{ith, nth, &scratch[size_t(ith)]});
}

std::vector<float> randn(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// theta_i = freq_scale * pos * base^(-2i/n_rot) / ff[i]; Normal mode rotates
// (2i, 2i+1), Neox (i, i + n_rot/2); dims >= n_rot unchanged.
TEST(CpuRope, NormalAndNeoxWithFreqFactorsMatchClosedForm) {
  std::mt19937 rng(21);
  const int64_t D = 32, H = 3, T = 4;
  for (RopeMode mode : {RopeMode::Normal, RopeMode::Neox})
    for (int n_rot : {32, 16})
      for (bool with_ff : {false, true}) {
        std::vector<float> xb = randn(size_t(D * H * T), rng);
        Tensor x = host_tensor(DType::F32, {D, H, T}, xb.data(), "x");
        std::vector<int32_t> pos = {0, 5, 19, 300};
        Tensor p = host_tensor(DType::I32, {T}, pos.data(), "pos");
        std::vector<float> ff(size_t(n_rot / 2));
        for (size_t i = 0; i < ff.size(); ++i) ff[i] = 1.0f + float(i % 5) * 1.75f;
        Tensor fft = host_tensor(DType::F32, {n_rot / 2}, ff.data(), "rope_freqs");
        std::vector<float> y(xb.size());
        Tensor yt = host_tensor(DType::F32, {D, H, T}, y.data(), "y");
        yt.src[0] = &x;
        yt.src[1] = &p;
        yt.src[2] = with_ff ? &fft : nullptr;
        yt.iparams[0] = n_rot;
        yt.iparams[1] = int32_t(mode);
        yt.fparams[0] = 10000.0f;
        yt.fparams[1] = 0.25f;
        for (int nth : {1, 3}) {
          std::fill(y.begin(), y.end(), NAN);
          run(op_rope, yt, nth);
          for (int64_t r = 0; r < H * T; ++r) {
            const float* xs = &xb[size_t(r * D)];
            const float* ys = &y[size_t(r * D)];
            const int32_t ps = pos[size_t(r / H)];
            for (int i = 0; i < n_rot / 2; ++i) {
              const double f = with_ff ? ff[size_t(i)] : 1.0;
              const double th = 0.25 * ps * std::pow(10000.0, -2.0 * i / n_rot) / f;
              const int a = mode == RopeMode::Neox ? i : 2 * i;
              const int b = mode == RopeMode::Neox ? i + n_rot / 2 : 2 * i + 1;
              const double x0 = xs[a], x1 = xs[b];
              const double tol = 2e-6 * (1.0 + ps) * (std::fabs(x0) + std::fabs(x1)) + 1e-6;
              ASSERT_NEAR(ys[a], x0 * std::cos(th) - x1 * std::sin(th), tol) << "i=" << i;
              ASSERT_NEAR(ys[b], x0 * std::sin(th) + x1 * std::cos(th), tol) << "i=" << i;
            }
            for (int64_t i = n_rot; i < D; ++i) ASSERT_EQ(ys[i], xs[i]);
          }
        }
      }
}

struct IsaGuard {
  ~IsaGuard() { simd::set_active_isa(simd::detect_isa()); }
};

TEST(CpuSiluMul, VectorKernelMatchesPlainOnEverySimdFamily) {
  IsaGuard guard;
  std::mt19937 rng(22);
  for (int64_t k : {1, 3, 7, 17, 33, 100, 257}) {
    const int64_t rows = 5;
    std::vector<float> a = randn(size_t(k * rows), rng, 6.0f), b = randn(size_t(k * rows), rng);
    a[0] = 0.0f;  // and some extremes
    if (a.size() > 3) a[1] = -120.0f, a[2] = 95.0f, a[3] = -1e-30f;
    std::vector<float> want(a.size()), got(a.size());
    Tensor at = host_tensor(DType::F32, {k, rows}, a.data(), "a"), bt = host_tensor(DType::F32, {k, rows}, b.data(), "b");
    Tensor wt = host_tensor(DType::F32, {k, rows}, want.data(), "want");
    wt.src[0] = &at;
    wt.src[1] = &bt;
    ref_silu_mul(wt);
    Tensor gt = wt;
    gt.data = got.data();
    for (simd::Isa isa : {simd::Isa::Generic, simd::Isa::Avx2, simd::Isa::Avx512}) {
      if (int(isa) > int(simd::detect_isa())) continue;
      simd::set_active_isa(isa);
      for (int nth : {1, 2, 3}) {
        std::fill(got.begin(), got.end(), NAN);
        run(op_silu_mul, gt, nth);
        for (size_t i = 0; i < a.size(); ++i) {
          const double x = a[i];
          const double exact = x / (1.0 + std::exp(-x)) * double(b[i]);
          const double tol = 4e-7 * std::fabs(exact) + 1e-30;  // vexp floors e^x at ~1e-38
          ASSERT_NEAR(got[i], want[i], 2 * tol) << simd::isa_name(isa) << " k=" << k << " a=" << x;
          ASSERT_NEAR(got[i], exact, tol) << simd::isa_name(isa) << " k=" << k << " a=" << x;
          ASSERT_NEAR(want[i], exact, tol) << "plain, a=" << x;
        }
      }
    }
  }
}

}  // namespace
}  // namespace weir::cpu
