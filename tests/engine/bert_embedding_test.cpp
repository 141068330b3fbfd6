// BERT encoders (model/bert.cpp: bert and nomic-bert) against an independent
// float64 numpy forward pass (tests/reference/bert_forward.py through
// embedding_reference.py, pooling and normalizing in numpy): weir synth's
// tiny bert and tiny nomic-bert, inputs of 9, 1, 14 and 5 tokens ([CLS] ...
// [SEP]) side by side in one step and packed whole into steps of 16
// tokens. CLS pooling reads the first token, which sees the later ones only
// through non-causal attention. Error of a vector: max_i |weir_i - ref_i| /
// max_i |ref_i|. Then what an encoder refuses: an input longer than a step
// (it cannot be cut), than its position table, and a graph of logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/embedding.h"
#include "json_lite.h"
#include "model/model.h"
#include "tiny_synth.h"

namespace weir {
namespace {

// embedding_reference.py on model for these sequences into dir/bert-ref.json;
// "" with *skip when python lacks numpy or gguf.
std::string reference(const std::string& model, const std::vector<std::vector<int32_t>>& seqs, bool* skip,
                      std::string* why) {
  const std::string out = model + ".ref.json";
  std::string cmd = "'" + test::python() + "' '" + test::ref_scripts() + "/embedding_reference.py' '" + model + "' '" + out + "'";
  for (const auto& s : seqs) {
    std::string arg;
    for (int32_t id : s) arg += (arg.empty() ? "" : ",") + std::to_string(id);
    cmd += " " + arg;
  }
  cmd += " 2>'" + model + ".ref.stderr'";
  const int rc = std::system(cmd.c_str());
  const int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  *skip = code == 77;
  if (code != 0) {
    *why = cmd + " exited with " + std::to_string(code);
    return "";
  }
  return out;
}

double rel_error(const float* got, const std::vector<double>& want) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::fabs(double(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return diff / scale;
}

// [CLS] words [SEP] of 9, 1 (a lone [CLS]), 14 and 5 tokens.
std::vector<std::vector<int32_t>> bert_inputs() {
  std::vector<std::vector<int32_t>> in;
  for (int n : {9, 1, 14, 5}) {
    std::vector<int32_t> s = {101};
    for (int k = 1; k < n - 1; ++k) s.push_back(int32_t(104 + (n * 37 + k * 101) % 400));
    if (n > 1) s.push_back(102);
    in.push_back(s);
  }
  return in;
}

class BertFloat64 : public ::testing::TestWithParam<const char*> {};

TEST_P(BertFloat64, PooledEmbeddingsMatchNumpy) {
  const std::string arch = GetParam();
  const std::string path = test::synth_tiny(arch, "bert-f64");
  const auto inputs = bert_inputs();
  bool skip = false;
  std::string why;
  const std::string ref_file = reference(path, inputs, &skip, &why);
  if (skip) GTEST_SKIP() << "python lacks numpy or gguf: " << why;
  ASSERT_FALSE(ref_file.empty()) << why;
  const auto cases = test::json::parse(test::json::read_file(ref_file))["cases"];
  ASSERT_EQ(cases.size(), inputs.size());

  auto model = Model::load(path);
  EXPECT_FALSE(model->hparams().causal);
  EXPECT_EQ(model_pooling(*model), arch == "bert" ? Pooling::Cls : Pooling::Mean);
  const int64_t E = model->hparams().n_embd;
  CpuOptions exact;
  exact.llama_rounding = false;
  CpuBackend backend(2, exact);
  SessionParams sp;
  sp.n_ctx = 64;
  sp.n_batch = 64;
  Session s(*model, backend, sp);
  for (int64_t step : {int64_t(64), int64_t(16)}) {
    for (const char* key : {"mean_l2", "mean", "cls_l2", "cls"}) {
      EmbedOptions o;
      o.pooling = std::string(key).rfind("mean", 0) == 0 ? Pooling::Mean : Pooling::Cls;
      o.normalize = std::string(key).find("_l2") != std::string::npos;
      o.step_tokens = step;
      const Embeddings got = embed_tokens(s, inputs, o);
      EXPECT_EQ(got.tokens, 29);
      EXPECT_EQ(got.steps, step == 64 ? 1 : 3);  // 9 + 1, 14, 5: no input cut
      double err = 0;
      for (size_t i = 0; i < inputs.size(); ++i) {
        ASSERT_EQ(int64_t(got.vectors[i].size()), E);
        err = std::max(err, rel_error(got.vectors[i].data(), cases[i][key].as_number_vector()));
      }
      std::printf("%s, %s, steps of %lld: max relative error %.3g\n", arch.c_str(), key,
                  static_cast<long long>(step), err);
      EXPECT_LT(err, 1e-4) << key << ", steps of " << step;
      EXPECT_EQ(s.kv_cache().n_free(), 64) << "every cell given back";
    }
  }
  // Every token's row.
  EmbedOptions o;
  o.pooling = Pooling::None;
  o.normalize = false;
  const Embeddings got = embed_tokens(s, inputs, o);
  double err = 0;
  for (size_t i = 0; i < inputs.size(); ++i)
    for (size_t t = 0; t < inputs[i].size(); ++t)
      err = std::max(err, rel_error(got.vectors[i].data() + t * size_t(E), cases[i]["hidden"][t].as_number_vector()));
  EXPECT_LT(err, 1e-4) << "pooling none";
}

INSTANTIATE_TEST_SUITE_P(Tiny, BertFloat64, ::testing::Values("bert", "nomic-bert"), [](const auto& info) {
  std::string n = info.param;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
});

TEST(BertEncoder, RefusesWhatItCannotEncode) {
  const std::string path = test::synth_tiny("bert", "bert-refuse");
  auto model = Model::load(path);
  EXPECT_TRUE(model->hparams().embeddings_only);
  EXPECT_EQ(model->hparams().n_pos_max, 512);
  CpuBackend backend(2);
  SessionParams sp;
  sp.n_ctx = 600;
  sp.n_batch = 600;
  Session s(*model, backend, sp);
  EmbedOptions o;
  o.step_tokens = 8;
  // Longer than a step: an encoder sees the whole input at once.
  try {
    embed_tokens(s, {{101, 200, 102}, std::vector<int32_t>(9, 200)}, o);
    ADD_FAILURE() << "an input longer than a step was cut";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input 1 has 9 tokens, more than a forward step takes (8)"), std::string::npos)
        << e.what();
  }
  // Past the 512 positions of its table (the context holds 600).
  o.step_tokens = 600;
  try {
    embed_tokens(s, {std::vector<int32_t>(513, 200)}, o);
    ADD_FAILURE() << "an input past the position table ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than the model's 512 positions"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.kv_cache().n_free(), 600);
  // A step the session is asked for directly stops at the table too.
  EXPECT_THROW(s.step_hidden(std::vector<int32_t>(513, 200), std::vector<int32_t>(513, 0), std::vector<int32_t>{0}),
               Error);
  EXPECT_EQ(s.seq_len(0), 0);
  // No LM head: a graph of logits is refused, naming why.
  try {
    s.eval(std::vector<int32_t>{101, 102});
    ADD_FAILURE() << "an encoder made logits";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("only makes embeddings"), std::string::npos) << e.what();
  }
}

// Plain planning of whole inputs: one that does not fit in the room left
// starts the next step; one longer than a step is an Error.
TEST(EmbeddingPlan, WholeInputsAreNeverCut) {
  const std::vector<int64_t> lengths = {3, 4, 2, 5};
  const auto steps = plan_embedding_steps(lengths, 6, true);
  ASSERT_EQ(steps.size(), 3u);
  ASSERT_EQ(steps[0].size(), 1u);  // 3; 4 does not fit in the 3 left
  ASSERT_EQ(steps[1].size(), 2u);  // 4 + 2
  ASSERT_EQ(steps[2].size(), 1u);  // 5
  for (const auto& st : steps)
    for (const EmbedChunk& c : st) {
      EXPECT_EQ(c.begin, 0);
      EXPECT_EQ(c.count, lengths[c.input]);
    }
  EXPECT_EQ(embedding_cells(lengths, 6, true), 6);
  EXPECT_THROW(plan_embedding_steps(lengths, 4, true), Error);
}

}  // namespace
}  // namespace weir
