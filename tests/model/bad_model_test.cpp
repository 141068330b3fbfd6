// Broken model files (tests/reference/tiny_models.py writes each as the tiny
// Llama 3 model with one defect): loading gives a weir::Error whose message
// names the key or tensor at fault, never a crash.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/warn.h"
#include "model/model.h"
#include "tiny_models.h"

namespace weir {
namespace {

struct BadCase {
  const char* name;
  const char* must_name;  // the key or tensor the message has to mention
  const char* what;       // and a word saying what is wrong with it
};

class BadModel : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadModel, LoadFailsWithErrorNamingTheCause) {
  const BadCase c = GetParam();
  WEIR_TINY_MODEL(dir, c.name, "");
  const std::string path = dir + "/" + c.name + ".gguf";
  try {
    auto m = Model::load(path);
    FAIL() << c.name << ": loaded without error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    std::printf("%s: %s\n", c.name, msg.c_str());
    EXPECT_NE(msg.find(c.must_name), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.what), std::string::npos) << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << "the file is named: " << msg;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Tiny, BadModel,
    ::testing::Values(BadCase{"broken-arch", "general.architecture", "'bogus'"},
                      BadCase{"broken-key", "llama.block_count", "missing"},
                      BadCase{"broken-shape", "blk.1.attn_k.weight", "shape"},
                      BadCase{"broken-dtype", "blk.0.ffn_up.weight", "f64"},
                      BadCase{"broken-missing", "blk.1.ffn_down.weight", "missing"},
                      BadCase{"broken-nrot", "llama.rope.dimension_count", "head size"},
                      BadCase{"broken-freqs", "rope_freqs.weight", "shape"},
                      BadCase{"broken-eps-nan", "llama.attention.layer_norm_rms_epsilon", "positive finite"},
                      BadCase{"broken-eps-zero", "llama.attention.layer_norm_rms_epsilon", "positive finite"}),
    [](const auto& info) {
      std::string n = info.param.name;
      for (char& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

// In range for their type, but wrong: the model loads, and a warning names
// the key (never silent).
struct WarnCase {
  const char* name;
  const char* must_name;
  const char* what;
};

class SuspiciousModel : public ::testing::TestWithParam<WarnCase> {};

TEST_P(SuspiciousModel, LoadsWithAWarningNamingTheKey) {
  const WarnCase c = GetParam();
  WEIR_TINY_MODEL(dir, c.name, "");
  std::vector<std::string> warnings;
  auto previous = set_warning_sink([&](const std::string& w) { warnings.push_back(w); });
  std::unique_ptr<Model> m;
  try {
    m = Model::load(dir + "/" + c.name + ".gguf");
  } catch (...) {
    set_warning_sink(previous);
    throw;
  }
  set_warning_sink(previous);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(c.must_name), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find(c.what), std::string::npos) << warnings[0];
}

// The out-of-range BOS id keeps the tokenizer's default (1, as llama.cpp).
TEST(SuspiciousModel, OutOfRangeBosKeepsTheDefault) {
  WEIR_TINY_MODEL(dir, "broken-bos", "default");
  auto previous = set_warning_sink([](const std::string&) {});
  auto m = Model::load(dir + "/broken-bos.gguf");
  set_warning_sink(previous);
  EXPECT_EQ(m->tokenizer().vocab().bos, 1);
}

INSTANTIATE_TEST_SUITE_P(
    Tiny, SuspiciousModel,
    ::testing::Values(WarnCase{"broken-ctx-zero", "llama.context_length", "is 0"},
                      WarnCase{"broken-bos", "tokenizer.ggml.bos_token_id", "outside the vocabulary"}),
    [](const auto& info) {
      std::string n = info.param.name;
      for (char& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

}  // namespace
}  // namespace weir
