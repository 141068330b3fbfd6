// gpt-oss against the independent float64 numpy forward
// (tests/reference/gpt_oss_forward.py, from HF transformers' GptOss with
// llama.cpp's YaRN; the `gguf` package dequantizes the weights): weir
// synth's tiny gpt-oss (2 layers: a sliding window of 8 then a global one,
// attention sinks, biases everywhere, 8 experts of which 3 run, YaRN x32)
// with its experts in MXFP4 and the other matrices F32 (MXFP4_F32) or in
// Q8_0 (MXFP4_MOE, llama-quantize's gpt-oss mixture). Logits of every
// position of a 20-token prompt (past the window), as one batch, in batches
// of 6, and one token at a time through the KV cache; exact and with
// llama.cpp's activation rounding. Error of a row: max_i |weir_i - ref_i| /
// max_i |ref_i|, under 1e-4 as in arch_float64_test. And weir inspect names
// the architecture, weir run generates.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "engine/session.h"
#include "json_lite.h"
#include "model/model.h"
#include "model/synth.h"
#include "test_env.h"
#include "tools/weir_cli.h"
#include "logit_compare.h"

namespace weir {
namespace {

using test::row_rel_error;

constexpr double kTol = 1e-4;

struct Case {
  const char* name;
  DType matrices;  // the type of the non-expert matrices
};

class GptOssFloat64 : public ::testing::TestWithParam<Case> {};

TEST_P(GptOssFloat64, LogitsMatchNumpyReference) {
  const Case c = GetParam();
  if (std::system((test::shell_quote(test::python()) + " -c 'import gguf, numpy' >/dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << "python lacks numpy or gguf";
  const std::string dir = test::own_dir();
  const std::string path = dir + "/" + c.name + ".gguf";
  SynthOptions o;
  o.threads = 2;
  o.sync = false;
  o.seed = 7;
  o.type_of = [&](const SynthTensor& t) {
    if (t.n_dims == 3) return DType::MXFP4;
    const bool matrix = t.n_dims == 2 && t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".weight") == 0 &&
                        t.name.find("ffn_gate_inp") == std::string::npos;
    return matrix ? c.matrices : DType::F32;
  };
  const SynthPreset& preset = find_synth_preset("gpt-oss", "tiny");
  ASSERT_EQ(preset.n_swa, 8);
  write_synth_model(preset, o, path);

  std::vector<int32_t> ids = {1};
  for (int i = 1; i < 20; ++i) ids.push_back(int32_t((i * 97 + 41) % 500 + 3));
  std::string cmd = "cd " + test::shell_quote(test::ref_scripts()) + " && " + test::shell_quote(test::python()) + " gpt_oss_forward.py " +
                    test::shell_quote(path) + " " + test::shell_quote(dir + "/ref.json");
  for (int32_t id : ids) cmd += " " + std::to_string(id);
  ASSERT_EQ(std::system((cmd + " 2>" + test::shell_quote(dir + "/stderr.txt")).c_str()), 0) << cmd << " (see stderr.txt)";
  const auto ref = test::json::parse(test::json::read_file(dir + "/ref.json"));
  // A router choice float32 could make differently would make the test flaky.
  ASSERT_GT(ref["router_margin"].as_number(), 1e-4);
  // Nor an activation float32 could round to another Q8_0 quant: weir's
  // products (repacked or not: sums in other orders) land up to 1e-4 quant
  // steps (most within 1e-5) from the reference's values, and one quant off
  // reaches the logits (0.9% of a row with "+ 13" in the ids above: layer
  // 0's attention output held 59.5000015 steps, 60 through the repacked
  // Q8_0 products, 59 through the file layout's and the reference's). The
  // ids above: 2.3e-5 (MXFP4_MOE).
  ASSERT_GT(ref["round_margin"].as_number(), 1e-5) << "choose other ids: an activation sits on a rounding boundary";

  const test::CliResult inspect = test::run_weir("inspect " + test::shell_quote(path));
  EXPECT_EQ(inspect.code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("gpt-oss"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find(", all read by weir\n"), std::string::npos) << inspect.out;
  const test::CliResult run = test::run_weir("run -m " + test::shell_quote(path) + " -p hello -n 8 -t 2");
  EXPECT_EQ(run.code, 0) << run.err;
  EXPECT_FALSE(run.out.empty()) << run.err;

  auto model = Model::load(path);
  const int32_t T = int32_t(ids.size());
  std::vector<int32_t> all(ids.size());
  std::iota(all.begin(), all.end(), 0);
  for (bool rounding : {false, true}) {
    SCOPED_TRACE(rounding ? "llama.cpp rounding" : "exact");
    std::vector<std::vector<double>> want;
    const auto& rows = ref[rounding ? "logits_rounded" : "logits"];
    for (size_t t = 0; t < rows.size(); ++t) want.push_back(rows[t].as_number_vector());
    ASSERT_EQ(want.size(), ids.size());
    CpuOptions opts;
    opts.llama_rounding = rounding;
    CpuBackend backend(2, opts);
    auto prompt_error = [&](int64_t n_batch) {
      Session s(*model, backend, SessionParams{4096, n_batch});  // a long cache: threads drift apart (a race once)
      s.eval(ids, all);
      double err = 0;
      for (int32_t t = 0; t < T; ++t) err = std::max(err, row_rel_error(s.logits(size_t(t)), want[size_t(t)]));
      return err;
    };
    const double err_batch = prompt_error(512), err_split = prompt_error(6);
    double err_decode = 0;
    {
      Session s(*model, backend, SessionParams{64, 512});
      for (int32_t t = 0; t < T; ++t) {
        s.eval(std::span(ids).subspan(size_t(t), 1));
        err_decode = std::max(err_decode, row_rel_error(s.logits(0), want[size_t(t)]));
      }
    }
    std::printf("%s (%s): max relative logit error: batch %.3g, split %.3g, decode %.3g\n", c.name,
                rounding ? "llama.cpp rounding" : "exact", err_batch, err_split, err_decode);
    EXPECT_LT(err_batch, kTol);
    EXPECT_LT(err_split, kTol);
    EXPECT_LT(err_decode, kTol);
  }
}

INSTANTIATE_TEST_SUITE_P(Files, GptOssFloat64,
                         ::testing::Values(Case{"MXFP4_F32", DType::F32}, Case{"MXFP4_MOE", DType::Q8_0}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace weir
