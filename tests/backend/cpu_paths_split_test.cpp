// The CPU backend's repacked and tile products (repack.h, amx_product.h)
// through a graph at every thread count 1-5: weight row counts that are no
// multiple of a group (8), of a thread chunk (32) or of a panel group (128),
// token counts below, at and above the tile paths' thresholds. Each
// product equals the same backend's at one thread bit for bit (a row's
// result does not depend on who computes it), and a float64 product of the
// dequantized weights and activations to the 8-bit activations' rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/graph.h"
#include "core/quant/random_blocks.h"

namespace weir {
namespace {

std::vector<float> product(int threads, bool fast, DType t, const std::vector<uint8_t>& w, int64_t K, int64_t N,
                           const std::vector<float>& x, int64_t T) {
  CpuOptions o;
  o.repack = fast;
  o.amx = fast;
  CpuBackend b(threads, o);
  Graph g;
  Tensor* W = g.external(t, {K, N}, const_cast<uint8_t*>(w.data()), "w");
  Tensor* X = g.input(DType::F32, {K, T}, "x");
  Tensor* y = g.mul_mat(W, X);
  g.mark_output(y);
  b.plan(g);
  std::copy(x.begin(), x.end(), static_cast<float*>(X->data));
  b.queue().run(g);
  b.queue().synchronize();
  const float* yd = static_cast<const float*>(y->data);
  return std::vector<float>(yd, yd + N * T);
}

TEST(CpuPathsSplit, EveryThreadCountComputesEachRowTheSame) {
  for (DType t : {DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const int64_t K = 512, N = 203;
    const size_t rb = row_bytes(t, K);
    std::vector<uint8_t> w(rb * size_t(N));
    for (int64_t r = 0; r < N; ++r) quant::random_fill(t, w.data() + size_t(r) * rb, K, 0.0f, 0.05f, 77 + uint64_t(r));
    std::vector<float> wf(size_t(K * N));
    for (int64_t r = 0; r < N; ++r) dequantize_row(t, w.data() + size_t(r) * rb, wf.data() + r * K, K);
    for (int64_t T : {1, 3, 9, 40}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " tokens " + std::to_string(T));
      std::mt19937 rng{static_cast<uint32_t>(T)};
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<float> x(static_cast<size_t>(K * T));
      for (float& v : x) v = nd(rng);
      const std::vector<float> one = product(1, true, t, w, K, N, x, T);
      for (int threads = 2; threads <= 5; ++threads)
        ASSERT_EQ(product(threads, true, t, w, K, N, x, T), one) << threads << " threads";
      for (int64_t j = 0; j < T; ++j)
        for (int64_t n = 0; n < N; ++n) {
          double s = 0, mag = 0;
          for (int64_t k = 0; k < K; ++k) {
            const double v = double(wf[size_t(n * K + k)]) * double(x[size_t(j * K + k)]);
            s += v;
            mag += std::fabs(v);
          }
          ASSERT_NEAR(one[size_t(j * N + n)], s, 1.5e-2 * mag + 1e-5) << "token " << j << " row " << n;
        }
    }
  }
}

}  // namespace
}  // namespace weir
