// Micro-benchmark of the quantizers: one 4096 x 4096 tensor, one thread,
// CPU time. Printed, not asserted.
#include <gtest/gtest.h>

#include <cstdio>
#include <ctime>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/quant/quantize.h"

namespace weir {
namespace {

TEST(Quantize, Rows4096x4096) {
  const int64_t n = 4096;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<float> x(size_t(n * n));
  for (float& v : x) v = nd(rng);
  for (DType t : {DType::Q4_K, DType::Q6_K, DType::Q4_0, DType::Q8_0}) {
    std::vector<uint8_t> q(size_t(n) * row_bytes(t, n));
    const std::clock_t c0 = std::clock();
    quant::quantize_rows(t, x.data(), q.data(), n, n);
    std::printf("%-5s 4096x4096: %.3f s CPU, one thread\n", dtype_name(t), double(std::clock() - c0) / CLOCKS_PER_SEC);
  }
}

}  // namespace
}  // namespace weir
