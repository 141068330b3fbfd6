// Broken model files (tests/reference/tiny_models.py writes each as the tiny
// Llama 3 model with one defect): loading gives a weir::Error whose message
// names the key or tensor at fault, never a crash.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
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
                      BadCase{"broken-freqs", "rope_freqs.weight", "shape"}),
    [](const auto& info) {
      std::string n = info.param.name;
      for (char& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

}  // namespace
}  // namespace weir
