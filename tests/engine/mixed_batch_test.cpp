// Continuous batching (Session::step_sample): each step packs the decode
// tokens of the running sequences and a chunk of a waiting prompt into one
// forward pass, sequences arrive at different steps, finish and give their
// cells back (remove_seq), and a new request reuses a finished one's id.
// Every sequence must generate what it generates alone (greedy, CPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/session.h"
#include "model/model.h"
#include "model/synth.h"
#include "test_env.h"
#include "tiny_synth.h"

namespace weir {
namespace {

struct Request {
  std::vector<int32_t> prompt;
  int arrives;  // the step it comes in at
  int seq = -1;
  size_t prefilled = 0;
  std::vector<int32_t> generated;
};

void check_arch(const std::string& arch) {
  SCOPED_TRACE(arch);
  auto model = Model::load(test::synth_tiny(arch, "mixed"));
  CpuBackend cpu(2);
  const int steps = 6;    // tokens each request generates
  const size_t budget = 7;  // tokens a forward step takes
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(model->hparams().n_vocab) - 1);
  std::vector<Request> reqs;
  for (auto [len, at] : {std::pair<int, int>{11, 0}, {3, 0}, {9, 2}, {1, 3}, {14, 5}, {4, 9}}) {
    Request r;
    for (int i = 0; i < len; ++i) r.prompt.push_back(tok(rng));
    r.arrives = at;
    reqs.push_back(r);
  }
  SessionParams sp;
  sp.n_ctx = 256;
  sp.n_batch = int64_t(budget);
  Session s(*model, cpu, sp);
  std::vector<int> free_ids = {2, 1, 0};  // at most three at once: ids are reused
  size_t done = 0;
  int mixed = 0;  // steps with decode tokens and a prompt chunk side by side
  for (int step = 0; done < reqs.size(); ++step) {
    ASSERT_LT(step, 200);
    std::vector<int32_t> tokens, seqs, out_rows;
    std::vector<Request*> sampled_for;
    // Decode tokens of the running requests first, then prompt chunks.
    for (Request& r : reqs)
      if (r.seq >= 0 && r.prefilled == r.prompt.size() && !r.generated.empty() && int(r.generated.size()) < steps &&
          tokens.size() < budget) {
        out_rows.push_back(int32_t(tokens.size()));
        tokens.push_back(r.generated.back());
        seqs.push_back(r.seq);
        sampled_for.push_back(&r);
      }
    for (Request& r : reqs) {
      if (r.arrives > step || r.prefilled == r.prompt.size() || tokens.size() >= budget) continue;
      if (r.seq < 0) {
        if (free_ids.empty()) continue;
        r.seq = free_ids.back();
        free_ids.pop_back();
      }
      const size_t n = std::min(budget - tokens.size(), r.prompt.size() - r.prefilled);
      for (size_t i = 0; i < n; ++i) {
        tokens.push_back(r.prompt[r.prefilled + i]);
        seqs.push_back(r.seq);
      }
      r.prefilled += n;
      if (r.prefilled == r.prompt.size()) {  // its first token comes from this step
        out_rows.push_back(int32_t(tokens.size() - 1));
        sampled_for.push_back(&r);
      }
    }
    if (tokens.empty()) continue;
    const size_t decoding = std::count_if(sampled_for.begin(), sampled_for.end(),
                                          [](const Request* r) { return r && r->prefilled == r->prompt.size() && !r->generated.empty(); });
    if (decoding > 0 && decoding < tokens.size()) ++mixed;
    if (out_rows.empty()) {  // only prompt chunks: sample a row anyway, ignored
      out_rows.push_back(int32_t(tokens.size() - 1));
      sampled_for.push_back(nullptr);
    }
    std::vector<float> params;
    for (size_t k = 0; k < out_rows.size(); ++k) params.insert(params.end(), {0.0f, 0.0f, 1.0f, 0.0f, 0.5f});
    const std::vector<int32_t> ids = s.step_sample(tokens, seqs, out_rows, params);
    ASSERT_EQ(ids.size(), out_rows.size());
    for (size_t k = 0; k < ids.size(); ++k) {
      Request* r = sampled_for[k];
      if (!r) continue;
      r->generated.push_back(ids[k]);
      if (int(r->generated.size()) == steps) {
        s.remove_seq(r->seq);
        EXPECT_EQ(s.seq_len(r->seq), 0);
        free_ids.push_back(r->seq);
        ++done;
      }
    }
  }
  EXPECT_GE(mixed, 3) << "the schedule must put prompt chunks beside decode tokens";
  for (size_t i = 0; i < reqs.size(); ++i)
    EXPECT_EQ(reqs[i].generated, test::greedy_alone(*model, cpu, reqs[i].prompt, steps)) << "request " << i;
}

TEST(MixedBatch, MatchesEachRequestAloneLlama) { check_arch("llama"); }
TEST(MixedBatch, MatchesEachRequestAloneGemma3) { check_arch("gemma3"); }  // sliding-window masks

TEST(MixedBatch, RejectsBadRows) {
  auto model = Model::load(test::synth_tiny("llama", "mixed"));
  CpuBackend cpu(2);
  SessionParams sp;
  sp.n_ctx = 32;
  sp.n_batch = 4;
  Session s(*model, cpu, sp);
  const std::vector<int32_t> t = {1, 2, 3}, q = {0, 0, 1};
  const std::vector<float> p(5, 0.0f), p2(10, 0.0f);
  EXPECT_THROW(s.step_sample(t, q, std::vector<int32_t>{3}, p), Error);         // past the tokens
  EXPECT_THROW(s.step_sample(t, q, std::vector<int32_t>{2, 1}, p2), Error);     // not ascending
  EXPECT_THROW(s.step_sample(t, q, std::vector<int32_t>{2}, p2), Error);        // 5 values a row
  EXPECT_THROW(s.step_sample(std::vector<int32_t>{1, 2, 3, 4, 5}, std::vector<int32_t>(5, 0), std::vector<int32_t>{4}, p),
               Error);  // more than the batch
  EXPECT_EQ(s.seq_len(0), 0) << "a refused step leaves nothing behind";
}

}  // namespace
}  // namespace weir
