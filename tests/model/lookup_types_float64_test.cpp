// Models whose matrices are IQ4_NL, IQ4_XS or MXFP4 against the independent
// float64 numpy forward (tests/reference/lookup_types_forward.py, which
// reads the weights with the `gguf` package's dequantizers): weir synth's
// tiny llama with every matrix (token embeddings and output included) of the
// type, the norms F32. Logits of every prompt position, the prompt as one
// batch and then one token at a time through the KV cache, exact and with
// llama.cpp's activation rounding (the integer dot kernels: Q8_0 blocks for
// IQ4_NL / MXFP4, Q8_K for IQ4_XS). Error of a row: max_i |weir_i - ref_i| /
// max_i |ref_i|, under 1e-4 as in arch_float64_test. And on the command
// line: weir inspect says it reads every tensor, weir run generates.
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

class LookupTypesFloat64 : public ::testing::TestWithParam<DType> {};

TEST_P(LookupTypesFloat64, LogitsMatchNumpyReference) {
  const DType type = GetParam();
  if (std::system((test::shell_quote(test::python()) + " -c 'import gguf, numpy' >/dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << "python lacks numpy or gguf";
  const std::string dir = test::own_dir();
  const std::string path = dir + "/" + dtype_name(type) + ".gguf";
  SynthOptions o;
  o.threads = 2;
  o.sync = false;
  o.type_of = [&](const SynthTensor& t) { return t.n_dims >= 2 ? type : DType::F32; };
  write_synth_model(find_synth_preset("llama", "tiny"), o, path);

  const std::vector<int32_t> ids = {1, 17, 300, 42, 5, 511, 99, 260, 3, 77, 128, 64};
  std::string cmd = "cd " + test::shell_quote(test::ref_scripts()) + " && " + test::shell_quote(test::python()) +
                    " lookup_types_forward.py " + test::shell_quote(path) + " " + test::shell_quote(dir + "/ref.json");
  for (int32_t id : ids) cmd += " " + std::to_string(id);
  ASSERT_EQ(std::system((cmd + " 2>" + test::shell_quote(dir + "/stderr.txt")).c_str()), 0) << cmd << " (see stderr.txt)";
  const auto ref = test::json::parse(test::json::read_file(dir + "/ref.json"));

  // The command line: weir inspect reads every tensor type; weir run generates.
  const test::CliResult inspect = test::run_weir("inspect " + test::shell_quote(path));
  EXPECT_EQ(inspect.code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find(", all read by weir\n"), std::string::npos) << inspect.out;
  const test::CliResult run = test::run_weir("run -m " + test::shell_quote(path) + " -p hello -n 8 -t 2");
  EXPECT_EQ(run.code, 0) << run.err;
  EXPECT_FALSE(run.out.empty()) << run.err;

  auto model = Model::load(path);
  for (bool rounding : {false, true}) {
    SCOPED_TRACE(rounding ? "llama.cpp rounding" : "exact");
    std::vector<std::vector<double>> want;
    const auto& rows = ref[rounding ? "logits_rounded" : "logits"];
    for (size_t t = 0; t < rows.size(); ++t) want.push_back(rows[t].as_number_vector());
    ASSERT_EQ(want.size(), ids.size());
    CpuOptions opts;
    opts.llama_rounding = rounding;
    CpuBackend backend(2, opts);
    const int32_t T = int32_t(ids.size());
    std::vector<int32_t> all(ids.size());
    std::iota(all.begin(), all.end(), 0);
    double err_batch = 0, err_decode = 0;
    {
      Session s(*model, backend, SessionParams{64, 512});
      s.eval(ids, all);
      for (int32_t t = 0; t < T; ++t) err_batch = std::max(err_batch, row_rel_error(s.logits(size_t(t)), want[size_t(t)]));
    }
    {
      Session s(*model, backend, SessionParams{64, 512});
      for (int32_t t = 0; t < T; ++t) {
        s.eval(std::span(ids).subspan(size_t(t), 1));
        err_decode = std::max(err_decode, row_rel_error(s.logits(0), want[size_t(t)]));
      }
    }
    std::printf("%s (%s): max relative logit error: batch %.3g, decode %.3g\n", dtype_name(type),
                rounding ? "llama.cpp rounding" : "exact", err_batch, err_decode);
    EXPECT_LT(err_batch, kTol);
    EXPECT_LT(err_decode, kTol);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, LookupTypesFloat64, ::testing::Values(DType::IQ4_NL, DType::IQ4_XS, DType::MXFP4),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace weir
