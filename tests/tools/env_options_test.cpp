// The WEIR_* variables that set process-wide CPU choices and the CUDA
// backend's knobs: parsed into the values the kernels read, and a bad value
// is a usage error, not a silent default.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>

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

// The CUDA backend's knobs (CudaOptions): each understood value sets its
// option; anything else, and a knob's name from before its rename, is a
// usage error of one line naming the variable.
class CudaEnv : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* v : {"WEIR_CUDA_DEFER_NORM", "WEIR_CUDA_NORM_FOLD", "WEIR_CUDA_ADD_NORM_SPLIT_K",
                          "WEIR_CUDA_PDL_OFF_OPS", "WEIR_CUDA_PDL_NODES", "WEIR_CUDA_ATTN_HEAD_BLOCKS"})
      unsetenv(v);
  }
};

TEST_F(CudaEnv, UnderstoodValuesSetTheOptions) {
  setenv("WEIR_CUDA_DEFER_NORM", "off", 1);
  setenv("WEIR_CUDA_ADD_NORM_SPLIT_K", "3", 1);
  setenv("WEIR_CUDA_PDL_OFF_OPS", "rms_norm,mul_mat", 1);
  setenv("WEIR_CUDA_PDL_NODES", "0-10,20-30", 1);
  CudaOptions o = tools::cuda_options_from_env(1);
  EXPECT_EQ(o.device, 1);
  EXPECT_FALSE(o.defer_norm);
  EXPECT_EQ(o.add_norm_split_k, 3);
  EXPECT_EQ(o.pdl_off_ops, "rms_norm,mul_mat");
  EXPECT_EQ(o.pdl_nodes, "0-10,20-30");
  setenv("WEIR_CUDA_DEFER_NORM", "1", 1);
  EXPECT_TRUE(tools::cuda_options_from_env().defer_norm);
}

TEST_F(CudaEnv, OtherValuesAreUsageErrors) {
  const std::pair<const char*, const char*> bad[] = {
      {"WEIR_CUDA_DEFER_NORM", "2"},          {"WEIR_CUDA_DEFER_NORM", "of"},
      {"WEIR_CUDA_ADD_NORM_SPLIT_K", "4"},    {"WEIR_CUDA_ADD_NORM_SPLIT_K", "1x"},
      {"WEIR_CUDA_ATTN_HEAD_BLOCKS", "-1"},   {"WEIR_CUDA_PDL_OFF_OPS", "rms_norm,matmul"},
      {"WEIR_CUDA_PDL_NODES", "3"},           {"WEIR_CUDA_PDL_NODES", "1-2,"},
      {"WEIR_CUDA_NORM_FOLD", "0"}};
  for (const auto& [name, value] : bad) {
    setenv(name, value, 1);
    try {
      tools::cuda_options_from_env();
      ADD_FAILURE() << name << "=" << value << " was taken";
    } catch (const tools::UsageError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(name), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
    unsetenv(name);
  }
}

}  // namespace
}  // namespace weir
