// Embeddings (engine/embedding.h) against an independent float64 numpy
// forward pass (tests/reference/embedding_reference.py over
// reference_forward.py, pooling and normalizing in numpy): tiny
// random-weight models of three architectures (llama, gemma3 with its
// sliding window, qwen3 whose file says pooling_type 2) for mean, CLS and
// last pooling, with and without L2 normalization, and pooling none (every
// token's row); the inputs side by side in one step, and split over steps
// of 5 tokens (a longer input's cells kept between its steps). Then the
// real Gemma 3 270M (skipped when absent): mean pooling of its hidden
// states, normalized, on the exact-float CPU path. Error of a vector:
// max_i |weir_i - ref_i| / max_i |ref_i|.
#include "engine/embedding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "json_lite.h"
#include "model/model.h"
#include "model/tiny_models.h"
#include "test_env.h"

namespace weir {
namespace {

TEST(EmbeddingPlan, InputsSideBySideAndSplitAcrossSteps) {
  const std::vector<int64_t> lengths = {3, 1, 6};
  const auto steps = plan_embedding_steps(lengths, 4);
  ASSERT_EQ(steps.size(), 3u);
  ASSERT_EQ(steps[0].size(), 2u);  // inputs 0 and 1 whole
  EXPECT_EQ(steps[0][0].input, 0u);
  EXPECT_EQ(steps[0][0].count, 3);
  EXPECT_EQ(steps[0][1].input, 1u);
  EXPECT_EQ(steps[0][1].count, 1);
  ASSERT_EQ(steps[1].size(), 1u);  // input 2's first 4, then its last 2
  EXPECT_EQ(steps[1][0].begin, 0);
  EXPECT_EQ(steps[1][0].count, 4);
  EXPECT_EQ(steps[2][0].begin, 4);
  EXPECT_EQ(steps[2][0].count, 2);
  EXPECT_EQ(embedding_cells(lengths, 4), 6);  // input 2 holds all its 6 in its last step
  EXPECT_EQ(embedding_cells(lengths, 512), 10);
  EXPECT_EQ(plan_embedding_steps(lengths, 512).size(), 1u);
  EXPECT_THROW(plan_embedding_steps(lengths, 0), Error);
}

// Runs embedding_reference.py on `model` for these sequences into dir/ref.json;
// "" with *skip when python lacks numpy or gguf.
std::string reference(const std::string& model, const std::vector<std::vector<int32_t>>& seqs, const std::string& dir,
                      bool* skip, std::string* why) {
  const std::string out = dir + "/ref.json";
  std::string cmd = "'" + test::python() + "' '" + test::ref_scripts() + "/embedding_reference.py' '" + model + "' '" + out + "'";
  for (const auto& s : seqs) {
    std::string arg;
    for (int32_t id : s) arg += (arg.empty() ? "" : ",") + std::to_string(id);
    cmd += " " + arg;
  }
  cmd += " 2>'" + dir + "/ref.stderr'";
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

// Three inputs of 7, 1 and 12 tokens (BOS first), ids from a fixed pattern.
std::vector<std::vector<int32_t>> tiny_inputs() {
  std::vector<std::vector<int32_t>> in;
  for (int n : {7, 1, 12}) {
    std::vector<int32_t> s = {1};
    for (int k = 1; k < n; ++k) s.push_back(int32_t(3 + (n * 37 + k * 101) % 290));
    in.push_back(s);
  }
  return in;
}

struct PoolCase {
  Pooling pooling;
  bool normalize;
  const char* key;  // the reference's field
};
const PoolCase kPoolCases[] = {
    {Pooling::Mean, true, "mean_l2"}, {Pooling::Mean, false, "mean"}, {Pooling::Cls, true, "cls_l2"},
    {Pooling::Cls, false, "cls"},     {Pooling::Last, true, "last_l2"}, {Pooling::Last, false, "last"},
};
constexpr double kTol = 1e-4;

class EmbeddingFloat64 : public ::testing::TestWithParam<const char*> {};

TEST_P(EmbeddingFloat64, PooledHiddenStatesMatchNumpy) {
  const std::string name = GetParam();
  WEIR_TINY_MODEL(dir, name, "embedding");
  const std::string model_file = dir + "/" + name + ".gguf";
  const auto inputs = tiny_inputs();
  bool skip = false;
  std::string why;
  const std::string ref_file = reference(model_file, inputs, dir, &skip, &why);
  if (skip) GTEST_SKIP() << "python lacks numpy or gguf: " << why;
  ASSERT_FALSE(ref_file.empty()) << why;
  const auto ref = test::json::parse(test::json::read_file(ref_file));
  const auto& cases = ref["cases"];
  ASSERT_EQ(cases.size(), inputs.size());

  auto model = Model::load(model_file);
  EXPECT_EQ(model_pooling(*model), name == "qwen3-cls" ? Pooling::Cls : Pooling::Mean);
  const int64_t E = model->hparams().n_embd;
  CpuOptions exact;
  exact.llama_rounding = false;
  CpuBackend backend(2, exact);
  for (int64_t step : {int64_t(512), int64_t(5)}) {
    Session s(*model, backend, SessionParams{64, 512});
    for (const PoolCase& pc : kPoolCases) {
      EmbedOptions o;
      o.pooling = pc.pooling;
      o.normalize = pc.normalize;
      o.step_tokens = step;
      const Embeddings got = embed_tokens(s, inputs, o);
      EXPECT_EQ(got.tokens, 20);
      EXPECT_EQ(got.steps, step == 512 ? 1 : 4);
      ASSERT_EQ(got.vectors.size(), inputs.size());
      double err = 0;
      for (size_t i = 0; i < inputs.size(); ++i) {
        ASSERT_EQ(int64_t(got.vectors[i].size()), E);
        err = std::max(err, rel_error(got.vectors[i].data(), cases[i][pc.key].as_number_vector()));
      }
      std::printf("%s, %s, steps of %lld: max relative error %.3g\n", name.c_str(), pc.key,
                  static_cast<long long>(step), err);
      EXPECT_LT(err, kTol) << pc.key << ", steps of " << step;
      EXPECT_EQ(s.kv_cache().n_free(), 64) << "every cell given back";
    }
    // No pooling: every token's row, as the reference's hidden states.
    EmbedOptions o;
    o.pooling = Pooling::None;
    o.normalize = false;
    o.step_tokens = step;
    const Embeddings got = embed_tokens(s, inputs, o);
    double err = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      ASSERT_EQ(got.vectors[i].size(), inputs[i].size() * size_t(E));
      for (size_t t = 0; t < inputs[i].size(); ++t)
        err = std::max(err, rel_error(got.vectors[i].data() + t * size_t(E), cases[i]["hidden"][t].as_number_vector()));
    }
    EXPECT_LT(err, kTol) << "pooling none, steps of " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, EmbeddingFloat64, ::testing::Values("llama3", "gemma3", "qwen3-cls"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

// A session's own sequence goes on as if no embedding had run beside it:
// its length, its cells, and the logits of its next token.
TEST(Embedding, LeavesTheSessionsOtherSequencesAlone) {
  WEIR_TINY_MODEL(dir, "llama3", "embedding-apart");
  auto model = Model::load(dir + "/llama3.gguf");
  CpuBackend backend(2);
  const std::vector<int32_t> prompt = {1, 40, 50, 60, 70}, next = {80};
  Session alone(*model, backend, SessionParams{64, 512});
  alone.eval(prompt);
  alone.eval(next);
  const std::vector<float> want(alone.logits(), alone.logits() + alone.n_vocab());

  Session s(*model, backend, SessionParams{64, 512});
  s.eval(prompt);
  const int64_t free_before = s.kv_cache().n_free();
  EmbedOptions o;
  o.first_seq = 3;
  o.step_tokens = 4;
  embed_tokens(s, tiny_inputs(), o);
  EXPECT_EQ(s.n_past(), int64_t(prompt.size()));
  EXPECT_EQ(s.kv_cache().n_free(), free_before);
  EXPECT_EQ(s.seq_len(3), 0);
  s.eval(next);
  for (int64_t v = 0; v < s.n_vocab(); ++v) ASSERT_EQ(s.logits()[v], want[size_t(v)]) << "token " << v;

  // An empty input or one longer than the context: an Error naming it, and nothing held.
  EXPECT_THROW(embed_tokens(s, {{1, 2}, {}}, o), Error);
  EXPECT_THROW(embed_tokens(s, {std::vector<int32_t>(65, 5)}, o), Error);
  // A token outside the vocabulary fails in its step: the cells of the
  // inputs before it are given back.
  EXPECT_THROW(embed_tokens(s, {{1, 2, 3}, {1, 999999}}, o), Error);
  EXPECT_EQ(s.kv_cache().n_free(), free_before - 1);  // (next's cell)
}

// The real Gemma 3 270M: mean pooling of its hidden states, normalized, on
// the CPU's exact-float path against numpy's float64 forward over the same
// dequantized weights (a few tokens, so the reference stays quick).
TEST(EmbeddingGemma3, MeanPoolingMatchesNumpyFloat64) {
  WEIR_REQUIRE_MODEL(path);
  auto model = Model::load(path);
  const Tokenizer& tok = model->tokenizer();
  const std::vector<std::vector<int32_t>> inputs = {tok.encode("Hello world", true, true),
                                                    tok.encode("The capital of France is Paris.", true, true)};
  const std::string dir = test::own_dir();
  bool skip = false;
  std::string why;
  const std::string ref_file = reference(path, inputs, dir, &skip, &why);
  if (skip) GTEST_SKIP() << "python lacks numpy or gguf: " << why;
  ASSERT_FALSE(ref_file.empty()) << why;
  const auto ref = test::json::parse(test::json::read_file(ref_file));
  EXPECT_EQ(model_pooling(*model), Pooling::Mean);  // no pooling_type: mean

  CpuOptions exact;
  exact.llama_rounding = false;
  CpuBackend backend(2, exact);
  Session s(*model, backend, SessionParams{256, 512});
  const Embeddings got = embed_tokens(s, inputs, EmbedOptions{});
  ASSERT_EQ(got.vectors.size(), 2u);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<double> want = ref["cases"][i]["mean_l2"].as_number_vector();
    ASSERT_EQ(got.vectors[i].size(), want.size());
    double dot = 0, diff = 0;
    for (size_t k = 0; k < want.size(); ++k) {
      dot += double(got.vectors[i][k]) * want[k];
      diff = std::max(diff, std::fabs(double(got.vectors[i][k]) - want[k]));
    }
    std::printf("input %zu (%zu tokens): cosine with float64 %.7f, max |difference| %.2e\n", i, inputs[i].size(), dot, diff);
    EXPECT_GT(dot, 0.99999);
    EXPECT_LT(diff, 2e-5);  // (seen: 4e-7)
  }
}

}  // namespace
}  // namespace weir
