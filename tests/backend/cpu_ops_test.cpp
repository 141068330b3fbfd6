// The CPU's kernels (backend/cpu/cpu_ops.h) where they are the CPU's own:
// every thread split (nth = 1, 2, 3, 7; the threads run one after another)
// gives one thread's bits, every SIMD family the CPU has agrees with the
// generic one (bit for bit, or with naive double-precision implementations
// written here where the families sum in different orders), llama.cpp's
// gelu table, the products' fast paths, packing and chunking, the fused
// rms_norm + mul, and errors of bad operands. What each op means is tested
// on every backend, this one among them: tests/backends.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
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
// Element-wise ops, rope, set_rows, get_rows: what each op means is tested
// on every backend (tests/backends/ops_on_every_backend_test.cpp, the CPU
// backend among them); here, that the CPU's kernels give the bits of one
// thread at every thread split and, where they have SIMD families, on every
// family.

struct Rows {
  std::vector<float> v;
  Tensor t;
  Rows(int64_t k, int64_t rows, std::mt19937& rng, const char* name, float scale = 1.0f)
      : v(randn(size_t(k * rows), rng, scale)) {
    t = host_tensor(DType::F32, {k, rows}, v.data(), name);
  }
};

// Runs op into dst at every thread split (every SIMD family too, with
// every_isa), out poisoned (or `reset`) before each run: the `bytes` bytes
// at out must be those of the first run (one thread; the generic family).
void expect_same_bits_every_split(OpFn op, const Tensor& dst, void* out, size_t bytes, bool every_isa,
                                  const std::string& what, const std::function<void()>& reset = {}) {
  IsaGuard guard;
  std::vector<uint8_t> first;
  for (simd::Isa isa : every_isa ? isas() : std::vector<simd::Isa>{simd::detect_isa()}) {
    simd::set_active_isa(isa);
    for (int nth : kThreadCounts) {
      if (reset) {
        reset();
      } else {
        std::memset(out, 0xFF, bytes);  // NaN
      }
      run(op, dst, nth);
      const auto* p = static_cast<const uint8_t*>(out);
      if (first.empty()) {
        first.assign(p, p + bytes);
        continue;
      }
      ASSERT_EQ(0, std::memcmp(first.data(), p, bytes)) << what << " nth " << nth << " isa " << simd::isa_name(isa);
    }
  }
}

TEST(CpuElementwise, MulAddScaleSplitsGiveOneThreadsBits) {
  std::mt19937 rng(7);
  const int64_t K = 77, R = 13;
  Rows a(K, R, rng, "a"), b(K, R, rng, "b"), b1(K, 1, rng, "b1");
  std::vector<float> y(size_t(K * R));
  Tensor yt = host_tensor(DType::F32, {K, R}, y.data(), "y");
  yt.src[0] = &a.t;
  for (const Tensor* bt : {&b.t, &b1.t}) {
    yt.src[1] = const_cast<Tensor*>(bt);
    const std::string what = bt->ne[1] == 1 ? " of a row" : "";
    expect_same_bits_every_split(op_mul, yt, y.data(), y.size() * 4, false, "mul" + what);
    expect_same_bits_every_split(op_add, yt, y.data(), y.size() * 4, false, "add" + what);
  }
  yt.src[1] = nullptr;
  yt.fparams[0] = 0.37f;
  expect_same_bits_every_split(op_scale, yt, y.data(), y.size() * 4, false, "scale");
}

// Every SIMD family and split gives the same bits (a strided input: rows 5
// floats apart past their end).
TEST(CpuElementwise, RmsNormFamiliesAndSplitsGiveTheSameBits) {
  std::mt19937 rng(8);
  for (int64_t K : {1, 7, 640, 1001}) {
    const int64_t R = 9, ld = K + 5;
    std::vector<float> xb = randn(size_t(ld * R), rng, 3.0f);
    Tensor x = host_tensor(DType::F32, {K, R}, xb.data(), "x");
    x.nb[1] = size_t(ld) * 4;
    x.nb[2] = x.nb[3] = x.nb[1] * size_t(R);
    std::vector<float> y(size_t(K * R));
    Tensor yt = host_tensor(DType::F32, {K, R}, y.data(), "y");
    yt.src[0] = &x;
    yt.fparams[0] = 1e-6f;
    expect_same_bits_every_split(op_rms_norm, yt, y.data(), y.size() * 4, true, "K " + std::to_string(K));
  }
}

double gelu_d(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * x * (1.0 + 0.044715 * x * x)));
}

// llama.cpp's gelu (the CPU's llama_rounding mode): ggml's fp16 table, the
// same bits on every family and split. The float formula (the exact mode,
// checked against float64 on every backend) is what iparams[0] = 1 asks
// for too.
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
  expect_same_bits_every_split(op_gelu_mul, yt, y.data(), y.size() * 4, true, "table");
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
    ASSERT_NEAR(y[size_t(i)], want, tol) << "x=" << x;
  }
  // The exact float formula (the exact mode, OpContext::exact) is what
  // iparams[0] = 1 asks for too, on every family and split.
  Scratch s;
  std::fill(y.begin(), y.end(), NAN);
  op_gelu_mul(yt, OpContext{0, 1, &s, /*exact=*/true});
  const std::vector<float> exact = y;
  yt.iparams[0] = 1;
  expect_same_bits_every_split(op_gelu_mul, yt, y.data(), y.size() * 4, true, "iparams[0] = 1");
  EXPECT_EQ(0, std::memcmp(exact.data(), y.data(), y.size() * 4)) << "iparams[0] = 1 gives the exact mode's bits";
}

// ---------------------------------------------------------------------------
// rope

// x the first H heads of a fused [D, H + 2, T] buffer (a strided view);
// n_rot 64 and 32; a Gemma-like base and freq_scale.
TEST(CpuRope, SplitsGiveOneThreadsBits) {
  std::mt19937 rng(10);
  struct Case {
    int64_t D;
    int n_rot;
    float base, freq_scale;
  };
  for (const Case& c : {Case{64, 64, 10000.0f, 1.0f}, Case{64, 32, 10000.0f, 1.0f}, Case{256, 256, 1e6f, 0.125f}}) {
    const int64_t D = c.D, H = 3, T = 5, Hall = H + 2;
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
    yt.iparams[0] = c.n_rot;
    yt.fparams[0] = c.base;
    yt.fparams[1] = c.freq_scale;
    const std::string what = "D " + std::to_string(D) + " n_rot " + std::to_string(c.n_rot);
    expect_same_bits_every_split(op_rope, yt, y.data(), y.size() * 4, false, what);
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

// The kernel's SIMD families: attention on every backend
// (tests/backends: CacheOps.Attention) runs the CPU's own family; here each
// family against float64 (they sum in different orders), and every thread
// split of a family giving its one thread's bits. Grouped heads, a sliding
// window, the last query row fully masked (as padding rows of a batch are),
// D 40 (no multiple of 16); and a prefill from position 0 (long key runs).
TEST(CpuAttention, EverySimdFamilyAndSplit) {
  IsaGuard guard;
  std::mt19937 rng(12);
  std::vector<AttnCase> cases;
  for (DType kv : {DType::F32, DType::F16, DType::Q8_0}) {
    for (int64_t Hkv : {1, 2})
      for (int64_t D : {64, kv == DType::Q8_0 ? 32 : 40}) {
        AttnCase& c = cases.emplace_back();
        c.D = D, c.Hq = 4, c.Hkv = Hkv, c.T = 6, c.S = 45, c.Smax = 64, c.kv = kv;
      }
    AttnCase& c = cases.emplace_back();
    c.D = 32, c.Hq = 4, c.Hkv = 1, c.T = 70, c.S = 70, c.Smax = 80, c.kv = kv;
  }
  for (AttnCase& c : cases) {
    const bool prefill = c.T == 70;
    build_attn(c, rng, prefill ? 0 : 39, prefill ? 1 << 30 : 20);
    if (!prefill)
      for (int64_t j = 0; j < c.S; ++j) c.mask[size_t((c.T - 1) * c.S + j)] = -INFINITY;
    for (simd::Isa isa : isas()) {
      simd::set_active_isa(isa);
      std::vector<float> one;
      for (int nth : kThreadCounts) {
        std::fill(c.out.begin(), c.out.end(), NAN);
        run(op_attention, c.o, nth);
        const std::string what = std::string(dtype_name(c.kv)) + " Hkv=" + std::to_string(c.Hkv) +
                                 " D=" + std::to_string(c.D) + " T=" + std::to_string(c.T) +
                                 " nth=" + std::to_string(nth) + " isa=" + simd::isa_name(isa);
        if (one.empty()) {
          one = c.out;
          check_attn(c, what.c_str());
          if (HasFatalFailure()) return;
        } else {
          ASSERT_EQ(0, std::memcmp(one.data(), c.out.data(), one.size() * 4)) << what << ": not one thread's bits";
        }
      }
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

TEST(CpuSetRows, SplitsGiveOneThreadsBits) {
  std::mt19937 rng(14);
  for (DType dt : {DType::F32, DType::F16, DType::Q8_0}) {
    const int64_t K = dt == DType::Q8_0 ? 96 : 37, N = 11, T = 4;
    const std::vector<uint8_t> before(row_bytes(dt, K) * size_t(N), 0x5A);
    std::vector<uint8_t> cache = before;
    Tensor ct = host_tensor(dt, {K, N}, cache.data(), "k_cache");
    std::vector<float> src = randn(size_t(K * T), rng);
    Tensor st = host_tensor(DType::F32, {K, T}, src.data(), "k_cur");
    std::vector<int32_t> idx = {9, 0, 4, 10};
    Tensor it = host_tensor(DType::I32, {T}, idx.data(), "kv_idx");
    const Tensor d = set_rows_node(ct, st, it);
    expect_same_bits_every_split(op_set_rows, d, cache.data(), cache.size(), false, dtype_name(dt),
                                 [&] { cache = before; });
  }
}

// An index out of range (too large or negative): thread 0 throws naming
// the op and the cache, the others return, and nothing is written.
TEST(CpuSetRows, IndexOutOfRangeIsAnErrorAndWritesNothing) {
  std::mt19937 rng(14);
  const int64_t K = 37, N = 11, T = 4;
  for (DType dt : {DType::F32, DType::F16}) {
    for (int nth : kThreadCounts) {
      std::vector<uint8_t> cache(row_bytes(dt, K) * size_t(N), 0x5A);
      Tensor ct = host_tensor(dt, {K, N}, cache.data(), "k_cache");
      std::vector<float> src = randn(size_t(K * T), rng);
      Tensor st = host_tensor(DType::F32, {K, T}, src.data(), "k_cur");
      std::vector<int32_t> idx = {9, 0, 4, 10};
      Tensor it = host_tensor(DType::I32, {T}, idx.data(), "kv_idx");
      Tensor d = set_rows_node(ct, st, it);
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
      }
    }
  }
}

TEST(CpuGetRows, SplitsGiveOneThreadsBitsAndABadIdThrows) {
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
    expect_same_bits_every_split(op_get_rows, yt, y.data(), y.size() * 4, true, dtype_name(t));
    std::vector<float> want(static_cast<size_t>(K));  // odd widths (203) too: the format's values
    for (int64_t r = 0; r < T; ++r) {
      dequantize_row(t, table.data() + size_t(ids[size_t(r)]) * row_bytes(t, K), want.data(), K);
      ASSERT_EQ(0, std::memcmp(want.data(), &y[size_t(r * K)], size_t(K) * 4)) << dtype_name(t) << " row " << r;
    }
    // A bad id throws on the thread whose rows hold it (ids are read only
    // inside a thread's chunks: they may be an activation whose memory is
    // reused once those chunks are done).
    ids[1] = int32_t(N);
    Scratch s;
    EXPECT_THROW(op_get_rows(yt, OpContext{0, 1, &s}), Error);
    int throws = 0;
    for (int ith = 0; ith < 2; ++ith) {
      try {
        op_get_rows(yt, OpContext{ith, 2, &s});
      } catch (const Error&) {
        ++throws;
      }
    }
    EXPECT_EQ(throws, 1) << dtype_name(t);
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
