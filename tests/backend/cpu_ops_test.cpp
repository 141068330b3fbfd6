// CPU kernels (backend/cpu/cpu_ops.h) against naive double-precision
// implementations written here, for every thread split (nth = 1, 2, 3, 7; the
// threads are run one after another) and every SIMD family the CPU has.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ops_dequant.h"
#include "backend/cpu/ops_simd.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "core/tensor.h"
#include "host_tensor.h"
#include "q8_blocks.h"

namespace weir::cpu {
namespace {

using OpFn = void (*)(const Tensor&, const OpContext&);

const int kThreadCounts[] = {1, 2, 3, 7};

// Owns the bytes behind a tensor (64-byte aligned, with slack after the end
// so an overrun would show up as a changed guard, not as a crash).
struct Buffer {
  std::vector<uint8_t> bytes;
  uint8_t* data() {
    const uintptr_t p = reinterpret_cast<uintptr_t>(bytes.data());
    return reinterpret_cast<uint8_t*>((p + 63) & ~uintptr_t(63));
  }
  explicit Buffer(size_t n = 0) : bytes(n + 64 + 256, 0xA5) {}
};

using test::host_tensor;

// Runs op for every thread of an nth-way split, one after another.
void run(OpFn op, const Tensor& dst, int nth) {
  std::vector<Scratch> scratch(static_cast<size_t>(nth));
  for (int ith = 0; ith < nth; ++ith) op(dst, OpContext{ith, nth, &scratch[size_t(ith)]});
}

std::vector<float> randn(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The SIMD families to test on this CPU (lower ones always run).
std::vector<simd::Isa> isas() {
  std::vector<simd::Isa> v = {simd::Isa::Generic};
  if (int(simd::detect_isa()) >= int(simd::Isa::Avx2)) v.push_back(simd::Isa::Avx2);
  if (int(simd::detect_isa()) >= int(simd::Isa::Avx512)) v.push_back(simd::Isa::Avx512);
  return v;
}
struct IsaGuard {
  ~IsaGuard() { simd::set_active_isa(simd::detect_isa()); }
};

// ---------------------------------------------------------------------------
// Random weights of every dequantizable dtype: random bytes with sane fp16
// scales (both sides dequantize with the same code, so any bit pattern of
// the quants is fine).

struct ScaleField {
  size_t offset;
  bool is_f32;
};
std::vector<ScaleField> scale_fields(DType t) {
  switch (t) {
    case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: return {{0, false}};
    case DType::Q4_1: case DType::Q5_1: return {{0, false}, {2, false}};
    case DType::Q2_K: return {{80, false}, {82, false}};
    case DType::Q3_K: return {{108, false}};
    case DType::Q4_K: case DType::Q5_K: return {{0, false}, {2, false}};
    case DType::Q6_K: return {{208, false}};
    case DType::Q8_K: return {{0, true}};
    default: return {};
  }
}

std::vector<uint8_t> random_rows(DType t, int64_t k, int64_t n, std::mt19937& rng) {
  const size_t row = row_bytes(t, k);
  std::vector<uint8_t> out(row * size_t(n));
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.002f, 0.02f);
  if (t == DType::F32 || t == DType::F16 || t == DType::BF16) {
    for (int64_t i = 0; i < k * n; ++i) {
      const float v = nd(rng);
      if (t == DType::F32) std::memcpy(out.data() + 4 * i, &v, 4);
      const uint16_t h = t == DType::F16 ? f32_to_fp16(v) : f32_to_bf16(v);
      if (t != DType::F32) std::memcpy(out.data() + 2 * i, &h, 2);
    }
    return out;
  }
  for (uint8_t& b : out) b = uint8_t(byte(rng));
  const DTypeTraits& tr = traits(t);
  const int64_t nblocks = k / tr.block_size * n;
  for (int64_t b = 0; b < nblocks; ++b) {
    uint8_t* blk = out.data() + size_t(b) * tr.type_size;
    for (const ScaleField& f : scale_fields(t)) {
      const float v = ud(rng) * (byte(rng) < 16 ? -1.0f : 1.0f);
      if (f.is_f32) {
        std::memcpy(blk + f.offset, &v, 4);
      } else {
        const uint16_t h = f32_to_fp16(v);
        std::memcpy(blk + f.offset, &h, 2);
      }
    }
  }
  return out;
}

const DType kAllWeightTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1,
                                 DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q2_K, DType::Q3_K,
                                 DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K};

int64_t test_k(DType t) {
  const int64_t bs = traits(t).block_size;
  if (bs == 256) return 256 * 3;
  if (bs == 32) return 96 + 32 * 3;
  return 203;  // plain types: not a multiple of any vector width
}

// ---------------------------------------------------------------------------
// Dequantization

TEST(CpuDequant, FastRowsMatchReferenceBitForBit) {
  IsaGuard guard;
  std::mt19937 rng(1);
  for (DType t : kAllWeightTypes) {
    const int64_t k = test_k(t), n = 5;
    const std::vector<uint8_t> w = random_rows(t, k, n, rng);
    std::vector<float> ref(size_t(k * n));
    for (int64_t r = 0; r < n; ++r)
      dequantize_row(t, w.data() + size_t(r) * row_bytes(t, k), ref.data() + r * k, k);
    for (simd::Isa isa : isas()) {
      simd::set_active_isa(isa);
      const size_t ld = size_t(k) + 7;
      std::vector<float> got(ld * size_t(n), -1.0f);
      dequantize_rows(t, w.data(), row_bytes(t, k), n, k, got.data(), ld);
      for (int64_t r = 0; r < n; ++r)
        ASSERT_EQ(0, std::memcmp(ref.data() + r * k, got.data() + size_t(r) * ld, size_t(k) * 4))
            << dtype_name(t) << " row " << r << " isa " << simd::isa_name(isa);
    }
  }
}

TEST(CpuDequant, F16SubnormalsAndInfinities) {
  IsaGuard guard;
  std::vector<uint16_t> h;
  for (uint32_t v = 0; v < 65536; ++v)
    if (((v >> 10) & 0x1f) != 0x1f || (v & 0x3ff) == 0) h.push_back(uint16_t(v));  // all but NaN
  const int64_t k = int64_t(h.size());
  std::vector<float> ref(h.size());
  dequantize_row(DType::F16, h.data(), ref.data(), k);
  for (simd::Isa isa : isas()) {
    simd::set_active_isa(isa);
    std::vector<float> got(h.size());
    dequantize_rows(DType::F16, h.data(), 0, 1, k, got.data(), 0);
    ASSERT_EQ(0, std::memcmp(ref.data(), got.data(), got.size() * 4)) << simd::isa_name(isa);
  }
}

// ---------------------------------------------------------------------------
// mul_mat

struct MatMulCase {
  Buffer wbuf, xbuf, ybuf, yref;
  Tensor w, x, y, yr;
  std::vector<float> wf;  // dequantized W, [N][K]
  int64_t K, N, T;
  MatMulCase(DType t, int64_t K_, int64_t N_, int64_t T_, std::mt19937& rng)
      : wbuf(row_bytes(t, K_) * size_t(N_)), xbuf(size_t(K_ * T_) * 4), ybuf(size_t(N_ * T_) * 4),
        yref(size_t(N_ * T_) * 4), K(K_), N(N_), T(T_) {
    const std::vector<uint8_t> wb = random_rows(t, K, N, rng);
    std::memcpy(wbuf.data(), wb.data(), wb.size());
    const std::vector<float> xv = randn(size_t(K * T), rng);
    std::memcpy(xbuf.data(), xv.data(), xv.size() * 4);
    w = host_tensor(t, {K, N}, wbuf.data(), "w");
    x = host_tensor(DType::F32, {K, T}, xbuf.data(), "x");
    y = host_tensor(DType::F32, {N, T}, ybuf.data(), "y");
    y.op = Op::MulMat;
    y.src[0] = &w;
    y.src[1] = &x;
    yr = y;
    yr.data = yref.data();
    wf.resize(size_t(K * N));
    for (int64_t n = 0; n < N; ++n)
      dequantize_row(t, wbuf.data() + size_t(n) * row_bytes(t, K), wf.data() + n * K, K);
  }
  const float* xs() { return reinterpret_cast<const float*>(xbuf.data()); }
  float* ys() { return reinterpret_cast<float*>(ybuf.data()); }
  float* yrs() { return reinterpret_cast<float*>(yref.data()); }
  // sum_k |w||x| for output (n, t): the scale of the rounding error.
  double mag(int64_t n, int64_t t) {
    double s = 0;
    for (int64_t k = 0; k < K; ++k) s += std::fabs(double(wf[size_t(n * K + k)]) * xs()[t * K + k]);
    return s;
  }
};

TEST(CpuMulMat, RefMatchesNaiveDoubleF32) {
  std::mt19937 rng(2);
  MatMulCase m(DType::F32, 203, 37, 5, rng);
  ref_mul_mat(m.yr);
  const float* w = reinterpret_cast<const float*>(m.wbuf.data());
  for (int64_t t = 0; t < m.T; ++t)
    for (int64_t n = 0; n < m.N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < m.K; ++k) s += double(w[n * m.K + k]) * m.xs()[t * m.K + k];
      EXPECT_NEAR(m.yrs()[t * m.N + n], s, 1e-6 * m.mag(n, t) + 1e-30);
    }
}

// Q8_0 quantized by hand (no dequantize_row on the naive side).
TEST(CpuMulMat, Q8_0HandQuantizedMatchesNaiveDouble) {
  std::mt19937 rng(3);
  const int64_t K = 192, N = 41, T = 17;
  std::vector<float> wv = randn(size_t(K * N), rng);
  Buffer wb(row_bytes(DType::Q8_0, K) * size_t(N));
  std::vector<double> wd(size_t(K * N));
  for (int64_t b = 0; b < K * N / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(wv[size_t(b * 32 + i)]));
    const uint16_t dh = f32_to_fp16(amax / 127.0f);
    const double d = fp16_to_f32(dh);
    uint8_t* blk = wb.data() + b * 34;
    std::memcpy(blk, &dh, 2);
    for (int i = 0; i < 32; ++i) {
      const int q = std::clamp(int(std::lround(wv[size_t(b * 32 + i)] / d)), -127, 127);
      blk[2 + i] = uint8_t(int8_t(q));
      wd[size_t(b * 32 + i)] = d * q;
    }
  }
  std::vector<float> xv = randn(size_t(K * T), rng);
  std::vector<float> y(size_t(N * T), NAN);
  Tensor w = host_tensor(DType::Q8_0, {K, N}, wb.data(), "w");
  Tensor x = host_tensor(DType::F32, {K, T}, xv.data(), "x");
  Tensor yt = host_tensor(DType::F32, {N, T}, y.data(), "y");
  yt.src[0] = &w;
  yt.src[1] = &x;
  for (int nth : kThreadCounts) {
    std::fill(y.begin(), y.end(), NAN);
    run(op_mul_mat, yt, nth);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          s += wd[size_t(n * K + k)] * xv[size_t(t * K + k)];
          mag += std::fabs(wd[size_t(n * K + k)] * xv[size_t(t * K + k)]);
        }
        ASSERT_NEAR(y[size_t(t * N + n)], s, 1e-5 * mag) << "n=" << n << " t=" << t << " nth=" << nth;
      }
  }
}

TEST(CpuMulMat, FastMatchesReferenceForEveryDtypeSplitAndIsa) {
  IsaGuard guard;
  std::mt19937 rng(4);
  for (DType t : kAllWeightTypes) {
    for (int64_t T : {1, 3, 8, 17}) {
      const int64_t N = T == 17 ? 67 : 37;
      MatMulCase m(t, test_k(t), N, T, rng);
      ref_mul_mat(m.yr);
      for (simd::Isa isa : isas()) {
        simd::set_active_isa(isa);
        for (int nth : kThreadCounts) {
          std::fill(m.ys(), m.ys() + N * T, NAN);
          run(op_mul_mat, m.y, nth);
          for (int64_t tt = 0; tt < T; ++tt)
            for (int64_t n = 0; n < N; ++n) {
              const float got = m.ys()[tt * N + n], want = m.yrs()[tt * N + n];
              ASSERT_TRUE(std::isfinite(got));
              ASSERT_NEAR(got, want, 1e-4 * m.mag(n, tt) + 1e-30)
                  << dtype_name(t) << " T=" << T << " n=" << n << " t=" << tt << " nth=" << nth
                  << " isa=" << simd::isa_name(isa);
            }
        }
      }
    }
  }
}

// A non-contiguous x (rows 3 floats apart past their end) and larger shapes
// that cross the chunk sizes of both kernels.
TEST(CpuMulMat, StridedXAndLargerShapes) {
  std::mt19937 rng(5);
  for (int64_t T : {2, 40}) {
    const int64_t K = 640, N = 300;
    MatMulCase m(DType::Q5_0, K, N, T, rng);
    // Re-lay x with padded rows.
    const int64_t ld = K + 3;
    std::vector<float> xp(size_t(ld * T), NAN);
    for (int64_t t = 0; t < T; ++t) std::memcpy(&xp[size_t(t * ld)], m.xs() + t * K, size_t(K) * 4);
    Tensor xv = host_tensor(DType::F32, {K, T}, xp.data(), "x_view");
    xv.nb[1] = size_t(ld) * 4;
    xv.nb[2] = xv.nb[3] = xv.nb[1] * size_t(T);
    m.y.src[1] = &xv;
    ref_mul_mat(m.yr);
    for (int nth : {1, 2, 7}) {
      std::fill(m.ys(), m.ys() + N * T, NAN);
      run(op_mul_mat, m.y, nth);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t n = 0; n < N; ++n)
          ASSERT_NEAR(m.ys()[t * N + n], m.yrs()[t * N + n], 1e-4 * m.mag(n, t))
              << "T=" << T << " n=" << n << " t=" << t;
    }
  }
}

// Enough W rows per thread that x is packed first (kPackMinRows), next to
// the same shape split so that it is not.
TEST(CpuMulMat, PackedAndInPlaceXAgree) {
  IsaGuard guard;
  std::mt19937 rng(16);
  const int64_t K = 96, N = 1090, T = 31;
  MatMulCase m(DType::Q4_0, K, N, T, rng);
  ref_mul_mat(m.yr);
  for (simd::Isa isa : isas()) {
    simd::set_active_isa(isa);
    for (int nth : {1, 2, 3}) {
      std::fill(m.ys(), m.ys() + N * T, NAN);
      run(op_mul_mat, m.y, nth);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t n = 0; n < N; ++n)
          ASSERT_NEAR(m.ys()[t * N + n], m.yrs()[t * N + n], 1e-4 * m.mag(n, t))
              << "n=" << n << " t=" << t << " nth=" << nth << " isa=" << simd::isa_name(isa);
    }
  }
}

TEST(CpuMulMat, BadShapesThrow) {
  std::vector<float> a(64 * 4), b(64 * 4), y(16);
  Tensor w = host_tensor(DType::F32, {64, 4}, a.data(), "w");
  Tensor x = host_tensor(DType::F32, {32, 4}, b.data(), "x");
  Tensor yt = host_tensor(DType::F32, {4, 4}, y.data(), "y");
  yt.src[0] = &w;
  yt.src[1] = &x;
  Scratch s;
  EXPECT_THROW(op_mul_mat(yt, OpContext{0, 1, &s}), Error);
  EXPECT_NO_THROW(op_mul_mat(yt, OpContext{1, 2, &s}));  // only thread 0 reports
}

// ---------------------------------------------------------------------------
// Element-wise ops

struct Rows {
  std::vector<float> v;
  Tensor t;
  Rows(int64_t k, int64_t rows, std::mt19937& rng, const char* name, float scale = 1.0f)
      : v(randn(size_t(k * rows), rng, scale)) {
    t = host_tensor(DType::F32, {k, rows}, v.data(), name);
  }
};

TEST(CpuElementwise, MulAddScaleWithBroadcast) {
  std::mt19937 rng(7);
  const int64_t K = 77, R = 13;
  Rows a(K, R, rng, "a"), b(K, R, rng, "b"), b1(K, 1, rng, "b1");
  std::vector<float> y(size_t(K * R));
  Tensor yt = host_tensor(DType::F32, {K, R}, y.data(), "y");
  yt.src[0] = &a.t;
  for (int nth : kThreadCounts) {
    for (const Tensor* bt : {&b.t, &b1.t}) {
      yt.src[1] = const_cast<Tensor*>(bt);
      const float* bv = static_cast<const float*>(bt->data);
      const bool bc = bt->ne[1] == 1;
      std::fill(y.begin(), y.end(), NAN);
      run(op_mul, yt, nth);
      for (int64_t i = 0; i < K * R; ++i)
        ASSERT_EQ(y[size_t(i)], a.v[size_t(i)] * bv[bc ? i % K : i]) << "mul nth=" << nth;
      std::fill(y.begin(), y.end(), NAN);
      run(op_add, yt, nth);
      for (int64_t i = 0; i < K * R; ++i)
        ASSERT_EQ(y[size_t(i)], a.v[size_t(i)] + bv[bc ? i % K : i]) << "add nth=" << nth;
    }
    yt.src[1] = nullptr;
    yt.fparams[0] = 0.37f;
    std::fill(y.begin(), y.end(), NAN);
    run(op_scale, yt, nth);
    for (int64_t i = 0; i < K * R; ++i) ASSERT_EQ(y[size_t(i)], a.v[size_t(i)] * 0.37f);
  }
}

TEST(CpuElementwise, RmsNormMatchesNaiveDouble) {
  IsaGuard guard;
  std::mt19937 rng(8);
  for (int64_t K : {1, 7, 640, 1001}) {
    const int64_t R = 9;
    // A strided input: rows 5 floats apart past their end.
    const int64_t ld = K + 5;
    std::vector<float> xb = randn(size_t(ld * R), rng, 3.0f);
    Tensor x = host_tensor(DType::F32, {K, R}, xb.data(), "x");
    x.nb[1] = size_t(ld) * 4;
    x.nb[2] = x.nb[3] = x.nb[1] * size_t(R);
    std::vector<float> y(size_t(K * R));
    Tensor yt = host_tensor(DType::F32, {K, R}, y.data(), "y");
    yt.src[0] = &x;
    yt.fparams[0] = 1e-6f;
    std::vector<float> first;  // every kernel family gives the same bits
    for (simd::Isa isa : isas()) {
      simd::set_active_isa(isa);
      for (int nth : kThreadCounts) {
        std::fill(y.begin(), y.end(), NAN);
        run(op_rms_norm, yt, nth);
        if (first.empty()) first = y;
        ASSERT_EQ(0, std::memcmp(first.data(), y.data(), y.size() * sizeof(float))) << simd::isa_name(isa);
        for (int64_t r = 0; r < R; ++r) {
          double ss = 0;
          for (int64_t i = 0; i < K; ++i) ss += double(xb[size_t(r * ld + i)]) * xb[size_t(r * ld + i)];
          const double sc = 1.0 / std::sqrt(ss / double(K) + 1e-6);
          for (int64_t i = 0; i < K; ++i) {
            const double want = xb[size_t(r * ld + i)] * sc;
            ASSERT_NEAR(y[size_t(r * K + i)], want, 1e-5 * std::fabs(want) + 1e-30)
                << "K=" << K << " r=" << r << " i=" << i << " nth=" << nth;
          }
        }
      }
    }
  }
}

double gelu_d(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * x * (1.0 + 0.044715 * x * x)));
}

TEST(CpuElementwise, GeluMulFollowsLlamaCppFp16Table) {
  IsaGuard guard;
  std::mt19937 rng(9);
  const int64_t K = 333, R = 7;
  Rows a(K, R, rng, "a", 4.0f), b(K, R, rng, "b");
  // Edge values: the +-10 cut-offs, fp16 subnormals, zero, huge values.
  const float edges[] = {-10.0f, 10.0f, -9.999f, 9.999f, 1e-6f, -3e-7f, 0.0f, -0.0f, 6.1e-5f,
                         70000.0f, -70000.0f, -20.0f, 20.0f, 1.0f / 3.0f};
  for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); ++i) a.v[i] = edges[i];
  std::vector<float> y(size_t(K * R));
  Tensor yt = host_tensor(DType::F32, {K, R}, y.data(), "y");
  yt.src[0] = &a.t;
  yt.src[1] = &b.t;
  std::vector<float> first;  // every kernel family gives the same bits
  for (simd::Isa isa : isas()) {
    simd::set_active_isa(isa);
    for (int nth : kThreadCounts) {
      std::fill(y.begin(), y.end(), NAN);
      run(op_gelu_mul, yt, nth);
      if (first.empty()) first = y;
      ASSERT_EQ(0, std::memcmp(first.data(), y.data(), y.size() * sizeof(float))) << simd::isa_name(isa);
      for (int64_t i = 0; i < K * R; ++i) {
        const float x = a.v[size_t(i)], g = b.v[size_t(i)];
        double want;
        double tol;
        if (x <= -10.0f) {
          want = 0.0, tol = 0.0;
        } else if (x >= 10.0f) {
          want = double(x) * g, tol = 1e-7 * std::fabs(want);
        } else {
          // gelu of x rounded to half, the result rounded to half. Slack: one
          // half ulp, and the float formula's cancellation in 1 + tanhf(..)
          // for negative x (about 0.5 * |x| * 2 * float eps).
          const double xh = fp16_to_f32(f32_to_fp16(x));
          const double gr = fp16_to_f32(f32_to_fp16(float(gelu_d(xh))));
          want = gr * g;
          tol = (std::fabs(gr) * 1e-3 + std::fabs(xh) * 1.2e-7 + 6e-8) * std::fabs(g);
        }
        ASSERT_NEAR(y[size_t(i)], want, tol) << "x=" << x << " nth=" << nth << " isa=" << simd::isa_name(isa);
      }
    }
  }
  // The exact float formula on request (iparams[0] = 1).
  yt.iparams[0] = 1;
  for (int nth : kThreadCounts) {
    std::fill(y.begin(), y.end(), NAN);
    run(op_gelu_mul, yt, nth);
    for (int64_t i = 0; i < K * R; ++i) {
      const float x = a.v[size_t(i)], g = b.v[size_t(i)];
      if (std::fabs(x) > 1000.0f) continue;  // tanhf saturates either way
      const double want = gelu_d(x) * g;
      ASSERT_NEAR(y[size_t(i)], want, 1e-5 * (std::fabs(double(x) * g)) + 1e-30) << "x=" << x;
    }
  }
}

// ---------------------------------------------------------------------------
// rope

TEST(CpuRope, NeoxMatchesClosedForm) {
  std::mt19937 rng(10);
  for (int n_rot : {64, 32}) {
    const int64_t D = 64, H = 3, T = 5;
    // x is the first H heads of a fused [D, H + 2, T] buffer (a strided view).
    const int64_t Hall = H + 2;
    std::vector<float> xb = randn(size_t(D * Hall * T), rng);
    Tensor x = host_tensor(DType::F32, {D, H, T}, xb.data(), "q_view");
    x.nb[2] = size_t(D * Hall) * 4;
    x.nb[3] = x.nb[2] * size_t(T);
    std::vector<int32_t> pos = {0, 1, 17, 40, 99};
    Tensor p = host_tensor(DType::I32, {T}, pos.data(), "pos");
    std::vector<float> y(size_t(D * H * T));
    Tensor yt = host_tensor(DType::F32, {D, H, T}, y.data(), "y");
    yt.src[0] = &x;
    yt.src[1] = &p;
    yt.iparams[0] = n_rot;
    yt.fparams[0] = 10000.0f;
    yt.fparams[1] = 1.0f;
    for (int nth : kThreadCounts) {
      std::fill(y.begin(), y.end(), NAN);
      run(op_rope, yt, nth);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h) {
          const float* xs = &xb[size_t((t * Hall + h) * D)];
          const float* ys = &y[size_t((t * H + h) * D)];
          for (int i = 0; i < n_rot / 2; ++i) {
            const double th = double(pos[size_t(t)]) * std::pow(10000.0, -2.0 * i / n_rot);
            const double x0 = xs[i], x1 = xs[i + n_rot / 2];
            const double tol = 1e-6 * (1.0 + pos[size_t(t)]) * (std::fabs(x0) + std::fabs(x1)) + 1e-6;
            ASSERT_NEAR(ys[i], x0 * std::cos(th) - x1 * std::sin(th), tol) << "t=" << t << " i=" << i;
            ASSERT_NEAR(ys[i + n_rot / 2], x0 * std::sin(th) + x1 * std::cos(th), tol);
          }
          for (int64_t i = n_rot; i < D; ++i) ASSERT_EQ(ys[i], xs[i]);
        }
    }
  }
}

// With freq_scale != 1 and a Gemma-like base: theta = freq_scale * pos * base^(-2i/n).
TEST(CpuRope, FreqScale) {
  std::mt19937 rng(11);
  const int64_t D = 256, H = 1, T = 2;
  std::vector<float> xb = randn(size_t(D * H * T), rng);
  Tensor x = host_tensor(DType::F32, {D, H, T}, xb.data(), "x");
  std::vector<int32_t> pos = {3, 12};
  Tensor p = host_tensor(DType::I32, {T}, pos.data(), "pos");
  std::vector<float> y(size_t(D * H * T));
  Tensor yt = host_tensor(DType::F32, {D, H, T}, y.data(), "y");
  yt.src[0] = &x;
  yt.src[1] = &p;
  yt.iparams[0] = int(D);
  yt.fparams[0] = 1e6f;
  yt.fparams[1] = 0.125f;
  run(op_rope, yt, 2);
  for (int64_t t = 0; t < T; ++t)
    for (int i = 0; i < D / 2; ++i) {
      const double th = 0.125 * pos[size_t(t)] * std::pow(1e6, -2.0 * i / double(D));
      const double x0 = xb[size_t(t * D + i)], x1 = xb[size_t(t * D + i + D / 2)];
      ASSERT_NEAR(y[size_t(t * D + i)], x0 * std::cos(th) - x1 * std::sin(th), 2e-6 * (std::fabs(x0) + std::fabs(x1)));
    }
}

// ---------------------------------------------------------------------------
// attention

struct AttnCase {
  int64_t D, Hq, Hkv, T, S, Smax;
  DType kv;
  std::vector<float> qkv;      // fused [D, Hq + 2*Hkv, T]; q is a view of it
  std::vector<uint8_t> kc, vc; // caches [D, Hkv, Smax]
  std::vector<float> mask;     // [S, T]
  std::vector<float> out;
  Tensor q, k, v, m, o;
};

void build_attn(AttnCase& c, std::mt19937& rng, int64_t pos0, int64_t window) {
  const int64_t Hall = c.Hq + 2 * c.Hkv;
  c.qkv = randn(size_t(c.D * Hall * c.T), rng);
  const size_t es = c.kv == DType::F32 ? 4 : 2;
  c.kc.assign(size_t(c.D * c.Hkv * c.Smax) * es, 0);
  c.vc.assign(size_t(c.D * c.Hkv * c.Smax) * es, 0);
  for (std::vector<uint8_t>* cache : {&c.kc, &c.vc}) {
    const std::vector<float> vals = randn(size_t(c.D * c.Hkv * c.Smax), rng, 1.5f);
    if (c.kv == DType::Q8_0) {  // heads of whole blocks: the cache is one run of blocks
      *cache = test::q8_0_encode(vals);
      continue;
    }
    for (size_t i = 0; i < vals.size(); ++i) {
      if (es == 4) {
        std::memcpy(cache->data() + 4 * i, &vals[i], 4);
      } else {
        const uint16_t h = f32_to_fp16(vals[i]);
        std::memcpy(cache->data() + 2 * i, &h, 2);
      }
    }
  }
  // Causal + sliding window: token t sits at pos0 + t; key j is visible when
  // j <= pos0 + t and pos0 + t - j < window.
  c.mask.assign(size_t(c.S * c.T), 0.0f);
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t j = 0; j < c.S; ++j) {
      const int64_t p = pos0 + t;
      if (j > p || p - j >= window) c.mask[size_t(t * c.S + j)] = -INFINITY;
    }
  c.out.assign(size_t(c.D * c.Hq * c.T), NAN);
  c.q = host_tensor(DType::F32, {c.D, c.Hq, c.T}, c.qkv.data(), "q");
  c.q.nb[2] = size_t(c.D * Hall) * 4;
  c.q.nb[3] = c.q.nb[2] * size_t(c.T);
  auto cache_view = [&](std::vector<uint8_t>& buf, const char* name) {
    Tensor t = host_tensor(c.kv, {c.D, c.Hkv, c.S}, buf.data(), name);
    t.nb[1] = row_bytes(c.kv, c.D);
    t.nb[2] = row_bytes(c.kv, c.D * c.Hkv);
    t.nb[3] = t.nb[2] * size_t(c.Smax);
    return t;
  };
  c.k = cache_view(c.kc, "k_cache");
  c.v = cache_view(c.vc, "v_cache");
  c.m = host_tensor(DType::F32, {c.S, c.T}, c.mask.data(), "mask");
  c.o = host_tensor(DType::F32, {c.D * c.Hq, c.T}, c.out.data(), "attn");
  c.o.src[0] = &c.q;
  c.o.src[1] = &c.k;
  c.o.src[2] = &c.v;
  c.o.src[3] = &c.m;
  c.o.fparams[0] = 1.0f / std::sqrt(float(c.D));
}

double cache_at(const AttnCase& c, const std::vector<uint8_t>& buf, int64_t d, int64_t g, int64_t j) {
  const size_t i = size_t((j * c.Hkv + g) * c.D + d);
  if (c.kv == DType::Q8_0) return test::q8_0_at(buf.data(), int64_t(i));
  if (c.kv == DType::F32) {
    float f;
    std::memcpy(&f, buf.data() + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, buf.data() + 2 * i, 2);
  return fp16_to_f32(h);
}

void check_attn(const AttnCase& c, const char* what) {
  const int64_t Hall = c.Hq + 2 * c.Hkv;
  const int64_t group = c.Hq / c.Hkv;
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t h = 0; h < c.Hq; ++h) {
      const int64_t g = h / group;
      const float* q = &c.qkv[size_t((t * Hall + h) * c.D)];
      std::vector<double> s(size_t(c.S));
      double mx = -INFINITY;
      for (int64_t j = 0; j < c.S; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < c.D; ++d) dot += double(q[d]) * cache_at(c, c.kc, d, g, j);
        s[size_t(j)] = dot * c.o.fparams[0] + c.mask[size_t(t * c.S + j)];
        mx = std::max(mx, s[size_t(j)]);
      }
      const float* got = &c.out[size_t(t * c.D * c.Hq + h * c.D)];
      if (mx == -INFINITY) {
        for (int64_t d = 0; d < c.D; ++d) ASSERT_EQ(got[d], 0.0f) << what << " fully masked t=" << t;
        continue;
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int64_t d = 0; d < c.D; ++d) {
        double o = 0, mag = 0;
        for (int64_t j = 0; j < c.S; ++j) {
          const double vv = cache_at(c, c.vc, d, g, j);
          o += s[size_t(j)] / sum * vv;
          mag += s[size_t(j)] / sum * std::fabs(vv);
        }
        ASSERT_NEAR(got[d], o, 2e-5 * mag + 1e-6) << what << " t=" << t << " h=" << h << " d=" << d;
      }
    }
}

TEST(CpuAttention, GqaCausalSlidingWindowF32F16AndQ8) {
  IsaGuard guard;
  std::mt19937 rng(12);
  for (DType kv : {DType::F32, DType::F16, DType::Q8_0})
    for (int64_t Hkv : {1, 2})
      for (int64_t D : {64, kv == DType::Q8_0 ? 32 : 40}) {
        AttnCase c;
        c.D = D, c.Hq = 4, c.Hkv = Hkv, c.T = 6, c.S = 45, c.Smax = 64, c.kv = kv;
        build_attn(c, rng, /*pos0=*/39, /*window=*/20);
        // The last query row fully masked (as padding rows of a batch are).
        for (int64_t j = 0; j < c.S; ++j) c.mask[size_t((c.T - 1) * c.S + j)] = -INFINITY;
        for (simd::Isa isa : isas()) {
          simd::set_active_isa(isa);
          for (int nth : kThreadCounts) {
            std::fill(c.out.begin(), c.out.end(), NAN);
            run(op_attention, c.o, nth);
            const std::string what = std::string(dtype_name(kv)) + " Hkv=" + std::to_string(Hkv) +
                                     " D=" + std::to_string(D) + " nth=" + std::to_string(nth) +
                                     " isa=" + simd::isa_name(isa);
            check_attn(c, what.c_str());
            if (HasFatalFailure()) return;
          }
        }
      }
}

TEST(CpuAttention, PrefillFromZeroLongKeyRuns) {
  std::mt19937 rng(13);
  for (DType kv : {DType::F32, DType::F16, DType::Q8_0}) {
    AttnCase c;
    c.D = 32, c.Hq = 4, c.Hkv = 1, c.T = 70, c.S = 70, c.Smax = 80, c.kv = kv;
    build_attn(c, rng, 0, 1 << 30);
    for (int nth : {1, 3}) {
      std::fill(c.out.begin(), c.out.end(), NAN);
      run(op_attention, c.o, nth);
      check_attn(c, dtype_name(kv));
      if (HasFatalFailure()) return;
    }
  }
}

// ---------------------------------------------------------------------------
// set_rows / get_rows

// set_rows' result node: a view of the cache, rows src at indices idx.
Tensor set_rows_node(Tensor& cache, Tensor& src, Tensor& idx) {
  Tensor d = cache;
  d.op = Op::SetRows;
  d.view_src = &cache;
  d.src[0] = &cache;
  d.src[1] = &src;
  d.src[2] = &idx;
  d.name = "set_rows";
  return d;
}

TEST(CpuSetRows, WritesRowsIntoF32AndF16Caches) {
  std::mt19937 rng(14);
  const int64_t K = 37, N = 11, T = 4;
  for (DType dt : {DType::F32, DType::F16}) {
    for (int nth : kThreadCounts) {
      const size_t es = dt == DType::F32 ? 4 : 2;
      std::vector<uint8_t> cache(size_t(K * N) * es, 0x5A);
      const std::vector<uint8_t> before = cache;
      Tensor ct = host_tensor(dt, {K, N}, cache.data(), "k_cache");
      std::vector<float> src = randn(size_t(K * T), rng);
      Tensor st = host_tensor(DType::F32, {K, T}, src.data(), "k_cur");
      std::vector<int32_t> idx = {9, 0, 4, 10};
      Tensor it = host_tensor(DType::I32, {T}, idx.data(), "kv_idx");
      Tensor d = set_rows_node(ct, st, it);
      run(op_set_rows, d, nth);
      for (int64_t r = 0; r < N; ++r) {
        const auto hit = std::find(idx.begin(), idx.end(), int32_t(r));
        for (int64_t i = 0; i < K; ++i) {
          const uint8_t* p = cache.data() + size_t(r * K + i) * es;
          if (hit == idx.end()) {
            ASSERT_EQ(0, std::memcmp(p, before.data() + size_t(r * K + i) * es, es));
            continue;
          }
          const float s = src[size_t((hit - idx.begin()) * K + i)];
          if (dt == DType::F32) {
            float f;
            std::memcpy(&f, p, 4);
            ASSERT_EQ(f, s);
          } else {
            uint16_t h;
            std::memcpy(&h, p, 2);
            ASSERT_EQ(h, f32_to_fp16(s));
          }
        }
      }
      // Out of range (too large and negative): thread 0 throws naming the
      // tensor, and nothing is written.
      for (int32_t bad : {int32_t(N), -1}) {
        idx[2] = bad;
        const std::vector<uint8_t> snap = cache;
        std::vector<Scratch> sc(static_cast<size_t>(nth));
        try {
          op_set_rows(d, OpContext{0, nth, &sc[0]});
          FAIL() << "no error for index " << bad;
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("set_rows"), std::string::npos) << e.what();
          EXPECT_NE(std::string(e.what()).find("k_cache"), std::string::npos) << e.what();
        }
        for (int ith = 1; ith < nth; ++ith) EXPECT_NO_THROW(op_set_rows(d, OpContext{ith, nth, &sc[size_t(ith)]}));
        EXPECT_EQ(snap, cache);
        idx[2] = 4;
      }
    }
  }
}

// 8-bit caches: each written row is the format's blocks of the source row
// (tests/q8_blocks.h, the test's own encoder), bit for bit; other rows stay.
TEST(CpuSetRows, WritesRowsIntoQ8Caches) {
  std::mt19937 rng(15);
  const int64_t K = 96, N = 7, T = 3;
  const size_t rb = row_bytes(DType::Q8_0, K);
  for (int nth : kThreadCounts) {
    std::vector<uint8_t> cache(rb * N, 0x5A);
    const std::vector<uint8_t> before = cache;
    Tensor ct = host_tensor(DType::Q8_0, {K, N}, cache.data(), "k_cache");
    std::vector<float> src = randn(size_t(K * T), rng);
    for (int64_t i = 0; i < 32; ++i) src[size_t(K + 32 + i)] = 0.0f;  // a block of zeros
    Tensor st = host_tensor(DType::F32, {K, T}, src.data(), "k_cur");
    std::vector<int32_t> idx = {6, 0, 3};
    Tensor it = host_tensor(DType::I32, {T}, idx.data(), "kv_idx");
    Tensor d = set_rows_node(ct, st, it);
    run(op_set_rows, d, nth);
    for (int64_t r = 0; r < N; ++r) {
      const auto hit = std::find(idx.begin(), idx.end(), int32_t(r));
      std::vector<uint8_t> want(before.begin() + r * rb, before.begin() + (r + 1) * rb);
      if (hit != idx.end()) {
        const int64_t t = hit - idx.begin();
        want = test::q8_0_encode(std::vector<float>(src.begin() + t * K, src.begin() + (t + 1) * K));
      }
      ASSERT_EQ(0, std::memcmp(cache.data() + r * rb, want.data(), rb)) << "row " << r << " nth=" << nth;
    }
  }
}

TEST(CpuGetRows, DequantizesRowsOfAnyTable) {
  std::mt19937 rng(15);
  for (DType t : {DType::F32, DType::F16, DType::Q8_0, DType::Q5_0, DType::Q4_K, DType::Q6_K, DType::Q3_K}) {
    const int64_t K = test_k(t), N = 19, T = 6;
    const std::vector<uint8_t> table = random_rows(t, K, N, rng);
    Tensor tt = host_tensor(t, {K, N}, const_cast<uint8_t*>(table.data()), "token_embd");
    std::vector<int32_t> ids = {3, 18, 0, 3, 7, 11};
    Tensor it = host_tensor(DType::I32, {T}, ids.data(), "ids");
    std::vector<float> y(size_t(K * T));
    Tensor yt = host_tensor(DType::F32, {K, T}, y.data(), "get_rows");
    yt.src[0] = &tt;
    yt.src[1] = &it;
    std::vector<float> want(static_cast<size_t>(K));
    for (int nth : kThreadCounts) {
      std::fill(y.begin(), y.end(), NAN);
      run(op_get_rows, yt, nth);
      for (int64_t r = 0; r < T; ++r) {
        dequantize_row(t, table.data() + size_t(ids[size_t(r)]) * row_bytes(t, K), want.data(), K);
        ASSERT_EQ(0, std::memcmp(want.data(), &y[size_t(r * K)], size_t(K) * 4)) << dtype_name(t) << " row " << r;
      }
    }
    ids[1] = int32_t(N);
    Scratch s;
    EXPECT_THROW(op_get_rows(yt, OpContext{0, 2, &s}), Error);
    ids[1] = 18;
  }
}

}  // namespace
}  // namespace weir::cpu

namespace weir::cpu {
namespace {

// The fused rms_norm + mul writes exactly what the two ops write apart, for
// a weight of one row (broadcast) and of one row per input row.
TEST(CpuOps, RmsNormMulFusedEqualsSeparateOps) {
  std::mt19937 rng(21);
  for (int64_t wrows : {int64_t(1), int64_t(9)}) {
    const int64_t K = 67, R = 9;
    std::vector<float> xb = randn(size_t(K * R), rng, 2.0f), wb = randn(size_t(K * wrows), rng);
    Tensor x = host_tensor(DType::F32, {K, R}, xb.data(), "x");
    Tensor w = host_tensor(DType::F32, {K, wrows}, wb.data(), "w");
    std::vector<float> n1(size_t(K * R)), y1(n1.size()), n2(n1.size(), NAN), y2(n1.size(), NAN);
    Tensor norm = host_tensor(DType::F32, {K, R}, n1.data(), "norm");
    norm.op = Op::RmsNorm;
    norm.src[0] = &x;
    norm.fparams[0] = 1e-6f;
    Tensor mul = host_tensor(DType::F32, {K, R}, y1.data(), "mul");
    mul.op = Op::Mul;
    mul.src[0] = &norm;
    mul.src[1] = &w;
    run(op_rms_norm, norm, 1);
    run(op_mul, mul, 1);
    ASSERT_TRUE(can_fuse_rms_norm_mul(norm, mul));
    norm.data = n2.data();
    mul.data = y2.data();
    for (int nth : kThreadCounts) {
      std::vector<Scratch> scratch(static_cast<size_t>(nth));
      for (int ith = 0; ith < nth; ++ith) op_rms_norm_mul(norm, mul, OpContext{ith, nth, &scratch[size_t(ith)]});
      EXPECT_EQ(0, std::memcmp(n1.data(), n2.data(), n1.size() * sizeof(float))) << "nth " << nth;
      EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float))) << "nth " << nth;
    }
    Tensor other = mul;
    other.src[0] = &x;  // mul of something else: not fusable
    EXPECT_FALSE(can_fuse_rms_norm_mul(norm, other));
  }
}

}  // namespace
}  // namespace weir::cpu
