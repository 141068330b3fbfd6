// Checks of Gemma 3 270M against llama.cpp's most precise path
// (../shared/ref/*.nofa-f32kv.jsonl: flash attention off, f32 KV cache) and
// against an independent float64 numpy forward pass
// (tests/data/gemma3-f64-logits.jsonl), for any backend: the CPU tests and
// the GPU tests run the same checks.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "backend/backend.h"
#include "engine/session.h"
#include "json_lite.h"
#include "model/model.h"
#include "test_env.h"

namespace weir::test::gemma3 {

inline int32_t argmax(const float* v, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = int32_t(i);
  return best;
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

inline void expect_greedy_matches(const Model& model, Backend& backend) {
  const auto cases = json::read_jsonl(ref_dir() + "/gemma3-greedy.nofa-f32kv.jsonl");
  const auto defaults = json::read_jsonl(ref_dir() + "/gemma3-greedy.jsonl");
  ASSERT_EQ(cases.size(), 8u);
  ASSERT_EQ(defaults.size(), cases.size());
  SessionParams sp;
  sp.n_ctx = 1024;
  Session s(model, backend, sp);
  int compared = 0;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const json::Value& c = cases[ci];
    ASSERT_EQ(defaults[ci]["prompt"].as_string(), c["prompt"].as_string());
    const auto prompt_ids = c["prompt_ids"].as_int_vector<int32_t>();
    const auto ids = c["ids"].as_int_vector<int32_t>();
    const auto margins = c["top1_top2_margins"].as_number_vector();
    const auto def_ids = defaults[ci]["ids"].as_int_vector<int32_t>();
    const auto def_margins = defaults[ci]["top1_top2_margins"].as_number_vector();
    EXPECT_EQ(model.tokenizer().encode(c["prompt"].as_string(), true, true), prompt_ids);
    s.reset();
    s.eval(prompt_ids);
    bool same_prefix = true;  // has the default-configuration run followed ids so far?
    size_t step = 0;
    for (; step < ids.size(); ++step) {
      const bool near_tie =
          margins[step] < kNearTie || (same_prefix && step < def_margins.size() && def_margins[step] < kNearTie);
      const int32_t ours = argmax(s.logits(), s.n_vocab());
      if (ours != ids[step]) {
        EXPECT_TRUE(near_tie) << "prompt '" << c["prompt"].as_string().substr(0, 40) << "' step " << step << ": weir "
                              << ours << ", reference " << ids[step] << " (margin " << margins[step] << ")";
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

// KL(ref || ours) over the reference's top tokens, both renormalised over them.
inline double kl_on(const std::vector<double>& ref, const std::vector<double>& ours) {
  auto log_softmax = [](std::vector<double> v) {
    const double mx = *std::max_element(v.begin(), v.end());
    double sum = 0;
    for (double x : v) sum += std::exp(x - mx);
    for (double& x : v) x = x - mx - std::log(sum);
    return v;
  };
  const auto lp_ref = log_softmax(ref), lp_ours = log_softmax(ours);
  double kl = 0;
  for (size_t i = 0; i < ref.size(); ++i) kl += std::exp(lp_ref[i]) * (lp_ref[i] - lp_ours[i]);
  return kl;
}

// Last-position logits: top-1 equal and KL(ref || weir) over the reference
// top-50 (both renormalised over those tokens) under 0.03 nats.
inline void expect_logits_match(const Model& model, Backend& backend) {
  const auto cases = json::read_jsonl(ref_dir() + "/gemma3-logits.nofa-f32kv.jsonl");
  ASSERT_EQ(cases.size(), 3u);
  SessionParams sp;
  sp.n_ctx = 1024;
  Session s(model, backend, sp);
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
    double max_diff = 0;
    for (size_t i = 0; i < 50; ++i) max_diff = std::max(max_diff, std::fabs(ref[i] - ours[i]));
    const double kl = kl_on(ref, ours);
    std::printf("prompt of %zu tokens: KL %.5f nats, max |logit diff| on top-50 %.4f\n", ids.size(), kl, max_diff);
    EXPECT_LT(kl, 0.03) << "prompt of " << ids.size() << " tokens";
    EXPECT_LT(max_diff, 1.0);
  }
}

// Distance to the float64 forward pass on its prompts: the largest |logit
// difference| on its top-50 and KL over them. Returns the largest of each.
struct Float64Distance {
  double max_diff = 0, max_kl = 0;
};
inline Float64Distance distance_to_float64(const Model& model, Backend& backend, const char* label) {
  Float64Distance d;
  SessionParams sp;
  sp.n_ctx = 256;
  sp.n_batch = 512;
  Session s(model, backend, sp);
  for (const auto& c : json::read_jsonl(data_dir() + "/gemma3-f64-logits.jsonl")) {
    const auto ids = c["ids"].as_int_vector<int32_t>();
    s.reset();
    s.eval(ids);
    std::vector<double> ref, ours;
    for (size_t i = 0; i < c["top50_f64"].size(); ++i) {
      const auto& e = c["top50_f64"][i];
      ref.push_back(e[1].as_number());
      ours.push_back(double(s.logits()[e[0].as_int()]));
    }
    double diff = 0;
    for (size_t i = 0; i < ref.size(); ++i) diff = std::max(diff, std::fabs(ref[i] - ours[i]));
    const double kl = kl_on(ref, ours);
    std::printf("%s, %zu tokens: max |logit - float64 logit| on the top-50 %.5f, KL %.6f\n", label, ids.size(), diff,
                kl);
    d.max_diff = std::max(d.max_diff, diff);
    d.max_kl = std::max(d.max_kl, kl);
  }
  return d;
}

}  // namespace weir::test::gemma3
