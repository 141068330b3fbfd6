// Gemma 3 270M on the CPU against llama.cpp's most precise path
// (../shared/ref/*.nofa-f32kv.jsonl: flash attention off, f32 KV cache).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "backend/cpu/cpu_backend.h"
#include "engine/session.h"
#include "json_lite.h"
#include "model/model.h"
#include "test_env.h"

namespace weir {
namespace {

namespace json = test::json;

struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<CpuBackend> backend;
};

Loaded& loaded(const std::string& path) {
  static Loaded l = [&] {
    Loaded x;
    x.model = Model::load(path);
    x.backend = std::make_unique<CpuBackend>(2);
    return x;
  }();
  return l;
}

int32_t argmax(const float* v, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = int32_t(i);
  return best;
}

TEST(Gemma3Reference, ModelShape) {
  WEIR_REQUIRE_MODEL(path);
  const HParams& h = loaded(path).model->hparams();
  EXPECT_EQ(h.n_layer, 18);
  EXPECT_EQ(h.n_embd, 640);
  EXPECT_EQ(h.n_head, 4);
  EXPECT_EQ(h.n_head_kv, 1);
  EXPECT_EQ(h.head_dim_k, 256);
  EXPECT_EQ(h.n_swa, 512);
  EXPECT_EQ(h.n_vocab, 262144);
  for (int il = 0; il < 18; ++il) EXPECT_EQ(h.is_swa[size_t(il)], (il + 1) % 6 != 0) << il;
}

// Greedy continuations: weir's own greedy tokens must equal the reference
// (flash attention off, f32 KV) for all steps, or up to the first step whose
// reference top-1/top-2 margin is under kNearTie logits. A divergence is also
// accepted at a step that is a near-tie in llama.cpp's default configuration
// (gemma3-greedy.jsonl) while that run has followed the same tokens.
// kNearTie is 0.2, not 0.1: the two llama.cpp configurations diverge from each
// other at steps whose reference-file margins reach 0.185, so llama.cpp itself
// does not reproduce tokens at such margins across its own CPU paths (weir's
// integer kernels diverge at margins 0.145 and 0.156 on two prompts).
constexpr double kNearTie = 0.2;

TEST(Gemma3Reference, GreedyContinuationsMatch) {
  WEIR_REQUIRE_MODEL(path);
  Loaded& l = loaded(path);
  const auto cases = json::read_jsonl(test::ref_dir() + "/gemma3-greedy.nofa-f32kv.jsonl");
  const auto defaults = json::read_jsonl(test::ref_dir() + "/gemma3-greedy.jsonl");
  ASSERT_EQ(cases.size(), 8u);
  ASSERT_EQ(defaults.size(), cases.size());
  SessionParams sp;
  sp.n_ctx = 1024;
  Session s(*l.model, *l.backend, sp);
  int compared = 0;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const json::Value& c = cases[ci];
    ASSERT_EQ(defaults[ci]["prompt"].as_string(), c["prompt"].as_string());
    const auto prompt_ids = c["prompt_ids"].as_int_vector<int32_t>();
    const auto ids = c["ids"].as_int_vector<int32_t>();
    const auto margins = c["top1_top2_margins"].as_number_vector();
    const auto def_ids = defaults[ci]["ids"].as_int_vector<int32_t>();
    const auto def_margins = defaults[ci]["top1_top2_margins"].as_number_vector();
    EXPECT_EQ(l.model->tokenizer().encode(c["prompt"].as_string(), true, true), prompt_ids);
    s.reset();
    s.eval(prompt_ids);
    bool same_prefix = true;  // has the default-configuration run followed ids so far?
    size_t step = 0;
    for (; step < ids.size(); ++step) {
      const bool near_tie =
          margins[step] < kNearTie ||
          (same_prefix && step < def_margins.size() && def_margins[step] < kNearTie);
      const int32_t ours = argmax(s.logits(), s.n_vocab());
      if (ours != ids[step]) {
        EXPECT_TRUE(near_tie) << "prompt '" << c["prompt"].as_string().substr(0, 40) << "' step " << step
                              << ": weir " << ours << ", reference " << ids[step] << " (margin " << margins[step]
                              << ")";
        break;
      }
      ++compared;
      if (margins[step] < kNearTie) break;  // past a near-tie the references themselves diverge
      same_prefix = same_prefix && step < def_ids.size() && def_ids[step] == ids[step];
      const int32_t next[1] = {ours};
      if (step + 1 < ids.size()) s.eval(next);
    }
    std::printf("prompt '%.30s...': %zu of %zu steps equal before a near-tie or the end\n",
                c["prompt"].as_string().c_str(), step, ids.size());
  }
  std::printf("compared %d steps\n", compared);
}

// Last-position logits: top-1 equal and KL(ref || weir) over the reference
// top-50 (both renormalised over those tokens) under 0.03 nats.
TEST(Gemma3Reference, LogitsMatchTop50) {
  WEIR_REQUIRE_MODEL(path);
  Loaded& l = loaded(path);
  const auto cases = json::read_jsonl(test::ref_dir() + "/gemma3-logits.nofa-f32kv.jsonl");
  ASSERT_EQ(cases.size(), 3u);
  SessionParams sp;
  sp.n_ctx = 1024;
  Session s(*l.model, *l.backend, sp);
  for (const json::Value& c : cases) {
    const auto ids = c["ids"].as_int_vector<int32_t>();
    s.reset();
    s.eval(ids);
    const float* lg = s.logits();
    const json::Value& top = c["top50"];
    ASSERT_EQ(top.size(), 50u);
    std::vector<int32_t> tid;
    std::vector<double> ref, ours;
    for (size_t i = 0; i < top.size(); ++i) {
      tid.push_back(int32_t(top[i][0].as_int()));
      ref.push_back(top[i][1].as_number());
      ours.push_back(lg[tid.back()]);
    }
    EXPECT_EQ(argmax(lg, s.n_vocab()), tid[0]) << "prompt of " << ids.size() << " tokens";
    auto log_softmax = [](std::vector<double> v) {
      const double mx = *std::max_element(v.begin(), v.end());
      double sum = 0;
      for (double x : v) sum += std::exp(x - mx);
      for (double& x : v) x = x - mx - std::log(sum);
      return v;
    };
    const auto lp_ref = log_softmax(ref), lp_ours = log_softmax(ours);
    double kl = 0, max_diff = 0;
    for (size_t i = 0; i < 50; ++i) {
      kl += std::exp(lp_ref[i]) * (lp_ref[i] - lp_ours[i]);
      max_diff = std::max(max_diff, std::fabs(ref[i] - ours[i]));
    }
    std::printf("prompt of %zu tokens: KL %.5f nats, max |logit diff| on top-50 %.4f\n", ids.size(), kl, max_diff);
    EXPECT_LT(kl, 0.03) << "prompt of " << ids.size() << " tokens";
    EXPECT_LT(max_diff, 1.0);
  }
}

}  // namespace
}  // namespace weir
