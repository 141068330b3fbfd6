// Which kernel a product runs on (backend/cuda/plan/product_rules.h), asked
// on the host: the MMA tile kernel's types take their 16-token tiles from
// CudaOptions::mma_min_tokens tokens on (a speculative step's verify), the
// decode kernels keep fewer, and always up to kMaxTwoRowTokens, where their
// fused launches (GLU, deferred norm, row jobs) need them.
#include <gtest/gtest.h>

#include <cstdint>

#include "backend/cuda/plan/kernel_rules.h"
#include "backend/cuda/plan/product_rules.h"
#include "core/graph.h"

namespace weir::cuda {
namespace {

// mul_mat of a [K = 256, N = 32] weight of type wt and T tokens.
struct Product {
  alignas(64) uint8_t w[32 * 256 * 2] = {};  // room for any type's rows
  Graph g;
  Tensor* dst;
  Product(DType wt, int64_t T) {
    dst = g.mul_mat(g.external(wt, {256, 32}, w, "w"), g.input(DType::F32, {256, T}, "x"));
  }
};

TEST(ProductRules, SmallBatchesOfMmaTypesRunOnTheTiles) {
  const CudaOptions defaults;
  CudaOptions old;
  old.mma_min_tokens = 9;  // the decode kernels up to kMaxVecTokens, as before
  for (DType wt : {DType::Q4_K, DType::Q6_K, DType::Q4_0, DType::Q8_0}) {
    for (int64_t T = 1; T <= 16; ++T) {
      Product p(wt, T);
      const bool tile = T >= defaults.mma_min_tokens;
      EXPECT_EQ(uses_tile(*p.dst, defaults), tile) << dtype_name(wt) << " T " << T;
      EXPECT_EQ(uses_vec(*p.dst, defaults), !tile) << dtype_name(wt) << " T " << T;
      EXPECT_EQ(mul_mat_quantizes_x(*p.dst, defaults), !tile) << dtype_name(wt) << " T " << T;
      EXPECT_EQ(uses_vec(*p.dst, old), T <= kMaxVecTokens) << dtype_name(wt) << " T " << T;
    }
  }
  // Below kMinMmaTokens the option is raised to it: the fused launches stay.
  CudaOptions low;
  low.mma_min_tokens = 1;
  for (int64_t T = 1; T <= kMaxTwoRowTokens; ++T) EXPECT_TRUE(uses_vec(*Product(DType::Q4_K, T).dst, low)) << T;
  // Types without the MMA kernel keep the decode kernels up to kMaxVecTokens.
  EXPECT_TRUE(uses_vec(*Product(DType::Q5_K, 8).dst, defaults));
  EXPECT_FALSE(uses_tile(*Product(DType::Q5_K, 8).dst, defaults));
  // The MMA kernel off: the decode kernels again.
  CudaOptions no_mma;
  no_mma.tile_mma = false;
  EXPECT_TRUE(uses_vec(*Product(DType::Q4_K, 8).dst, no_mma));
}

}  // namespace
}  // namespace weir::cuda
