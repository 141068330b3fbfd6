// BERT encoders (bert, nomic-bert: weir synth's tiny presets) on every
// backend present (CPU, chaos, CUDA) against the independent float64 numpy
// forward pass (tests/reference/bert_forward.py through
// embedding_reference.py), through embed_tokens: every token's hidden state
// (pooling none) of inputs of 9, 1 and 14 tokens side by side in one step,
// then packed whole into steps of 16 tokens.
// The CPU and chaos run the exact float path (1e-4 of the largest value of
// a row); the CUDA backend's fp16 activations in its products are held to
// 2e-2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/registry.h"
#include "backends/named_backends.h"
#include "engine/embedding.h"
#include "json_lite.h"
#include "model/model.h"
#include "tiny_synth.h"
#include "logit_compare.h"

namespace weir {
namespace {

using test::row_rel_error;

struct Case {
  const char* arch;
  const char* backend;
};

class Encoders : public ::testing::TestWithParam<Case> {};

TEST_P(Encoders, HiddenStatesMatchTheFloat64Reference) {
  const Case c = GetParam();
  if (std::string(c.backend) == "cuda" && cuda_devices().empty()) GTEST_SKIP() << "no GPU";
  const std::string path = test::synth_tiny(c.arch, std::string("encoders-") + c.backend);
  std::vector<std::vector<int32_t>> inputs;
  for (int n : {9, 1, 14}) {
    std::vector<int32_t> s = {101};
    for (int k = 1; k < n - 1; ++k) s.push_back(int32_t(104 + (n * 53 + k * 97) % 400));
    if (n > 1) s.push_back(102);
    inputs.push_back(s);
  }
  const std::string out = path + ".ref.json";
  std::string cmd = "'" + test::python() + "' '" + test::ref_scripts() + "/embedding_reference.py' '" + path + "' '" + out + "'";
  for (const auto& s : inputs) {
    std::string arg;
    for (int32_t id : s) arg += (arg.empty() ? "" : ",") + std::to_string(id);
    cmd += " " + arg;
  }
  const int rc = std::system((cmd + " 2>'" + path + ".ref.stderr'").c_str());
  const int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  if (code == 77) GTEST_SKIP() << "python lacks numpy or gguf";
  ASSERT_EQ(code, 0) << cmd;
  const auto cases = test::json::parse(test::json::read_file(out))["cases"];

  auto model = Model::load(path);
  auto backend = test::make_named_backend(c.backend, 50);
  SessionParams sp;
  sp.n_ctx = 64;
  sp.n_batch = 64;
  Session s(*model, *backend, sp);
  const int64_t E = model->hparams().n_embd;
  const double tol = std::string(c.backend) == "cuda" ? 2e-2 : 1e-4;
  for (int64_t step : {int64_t(64), int64_t(16)}) {
    EmbedOptions o;
    o.pooling = Pooling::None;
    o.normalize = false;
    o.step_tokens = step;
    const Embeddings got = embed_tokens(s, inputs, o);
    EXPECT_EQ(got.steps, step == 64 ? 1 : 2);
    for (size_t i = 0; i < inputs.size(); ++i)
      for (size_t t = 0; t < inputs[i].size(); ++t)
        EXPECT_LT(row_rel_error(got.vectors[i].data() + t * size_t(E), cases[i]["hidden"][t].as_number_vector()), tol)
            << "input " << i << " token " << t << ", steps of " << step;
  }
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (const char* m : {"bert", "nomic-bert"})
    for (const char* b : {"cpu", "chaos", "cuda"}) v.push_back({m, b});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Tiny, Encoders, ::testing::ValuesIn(cases()), [](const auto& info) {
  std::string n = std::string(info.param.arch) + "_" + info.param.backend;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

}  // namespace
}  // namespace weir
