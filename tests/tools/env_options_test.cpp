// The WEIR_* variables that set process-wide CPU choices: parsed into the
// values the kernels read, and a bad value is a usage error, not a silent
// default.
#include <gtest/gtest.h>

#include <cstdlib>

#include "backend/cpu/qdot.h"
#include "tools/args.h"
#include "tools/env_options.h"

namespace weir {
namespace {

class ProcessEnv : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = cpu::prefetch_plan(); }
  void TearDown() override {
    unsetenv("WEIR_PREFETCH");
    unsetenv("WEIR_SIMD");
    cpu::set_prefetch(saved_);
    cpu::set_simd_cap(cpu::SimdLevel::AVX512_VNNI);
  }
  cpu::PrefetchPlan saved_;
};

TEST_F(ProcessEnv, PrefetchDistanceAndCache) {
  setenv("WEIR_PREFETCH", "4096,l2", 1);
  tools::apply_process_env();
  EXPECT_EQ(cpu::prefetch_plan().bytes, 4096u);
  EXPECT_EQ(cpu::prefetch_plan().level, 1);
  setenv("WEIR_PREFETCH", "0", 1);
  tools::apply_process_env();
  EXPECT_EQ(cpu::prefetch_plan().bytes, 0u);
  EXPECT_EQ(cpu::prefetch_plan().level, 0);
}

TEST_F(ProcessEnv, BadValuesAreUsageErrors) {
  // (An empty value is as if unset, like every WEIR_* variable.)
  for (const char* v : {"x", "12k", "-5", "4096,l4", "4096,", "99999999"}) {
    setenv("WEIR_PREFETCH", v, 1);
    EXPECT_THROW(tools::apply_process_env(), tools::UsageError) << v;
  }
  unsetenv("WEIR_PREFETCH");
  setenv("WEIR_SIMD", "sse2", 1);
  EXPECT_THROW(tools::apply_process_env(), tools::UsageError);
}

}  // namespace
}  // namespace weir
