// weir's exact-float path (no llama.cpp activation rounding) against an
// independent float64 numpy forward pass (tests/reference/gemma3_forward.py,
// now an alias of reference_forward.py, made tests/data/gemma3-f64-logits.jsonl
// from the same GGUF file). Tiny Gemma 3 models join the other architectures
// in arch_float64_test.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "engine/session.h"
#include "json_lite.h"
#include "model/model.h"
#include "test_env.h"

namespace weir {
namespace {

TEST(Gemma3Float64, ExactPathMatchesNumpyReference) {
  WEIR_REQUIRE_MODEL(path);
  auto model = Model::load(path);
  CpuOptions exact;
  exact.llama_rounding = false;
  CpuBackend backend(2, exact);
  Session s(*model, backend, SessionParams{256, 512});
  for (const auto& c : test::json::read_jsonl(test::data_dir() + "/gemma3-f64-logits.jsonl")) {
    const auto ids = c["ids"].as_int_vector<int32_t>();
    s.reset();
    s.eval(ids);
    double max_diff = 0;
    for (size_t i = 0; i < c["top50_f64"].size(); ++i) {
      const auto& e = c["top50_f64"][i];
      max_diff = std::max(max_diff, std::fabs(double(s.logits()[e[0].as_int()]) - e[1].as_number()));
    }
    std::printf("%zu tokens: max |logit - float64 logit| on the top-50: %.5f\n", ids.size(), max_diff);
    EXPECT_LT(max_diff, 0.01);
  }
}

}  // namespace
}  // namespace weir
