// Speculative decoding gives the tokens plain decoding gives (issue 48,
// item 2), on every backend (cpu, chaos: the scheduler's split; cuda on a
// GPU host): engine/generator.h with guesses against the same generator
// without any, greedy and sampled (same seed: the same draws at the same
// positions), sampling on the backend and on the host. The guesses come
// from n-gram lookup and from a proposer that replays the plain run's tokens
// with every third guess wrong, so that steps keep some guesses and refuse
// others; the test checks that both happened.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/generator.h"
#include "engine/ngram_proposer.h"
#include "engine/session.h"
#include "model/model.h"
#include "op_check.h"
#include "tiny_synth.h"

namespace weir {
namespace {

using V = std::vector<int32_t>;

// Guesses the tokens of a known answer after the prompt, every third one
// wrong (+1).
class ReplayProposer final : public DraftProposer {
 public:
  ReplayProposer(size_t prompt_len, V answer) : prompt_len_(prompt_len), answer_(std::move(answer)) {}
  V propose(std::span<const int32_t> tokens, int max_tokens) override {
    V g;
    for (size_t i = tokens.size() - prompt_len_; i < answer_.size() && int(g.size()) < max_tokens; ++i)
      g.push_back(++n_ % 3 == 0 ? (answer_[i] + 1) % 512 : answer_[i]);
    return g;
  }

 private:
  size_t prompt_len_;
  V answer_;
  int n_ = 0;
};

class Speculative : public test::OnEveryBackend<std::string> {};

struct Generated {
  V tokens;
  SpecStats stats;
};

Generated generate(const Model& m, Backend& b, const V& prompt, int n, bool on_backend, float temp, DraftProposer* p) {
  SessionParams sp;
  sp.n_ctx = 256;
  sp.n_batch = 64;
  Session s(m, b, sp);
  SamplerParams smp;
  smp.temperature = temp;
  smp.top_k = 20;
  smp.top_p = 1.0f;
  smp.min_p = 0.0f;
  smp.seed = 7;
  Sampler host(smp, int(m.hparams().n_vocab));
  GeneratorSampling how;
  how.on_backend = on_backend;
  how.backend.temperature = temp;
  how.backend.top_k = 20;
  how.backend.top_p = 1.0f;
  how.backend.min_p = 0.0f;
  how.backend.seed = 7;
  how.host = &host;
  // draft_min 2: guesses every step, whatever the rule would learn.
  Generator g(s, how, p, {.draft_min = p ? 2 : 0, .draft_max = 6});
  Generated r;
  r.tokens.push_back(g.start(prompt));
  while (int(r.tokens.size()) < n) {
    const V t = g.next(n - int(r.tokens.size()));
    EXPECT_LE(int(t.size()), n);
    r.tokens.insert(r.tokens.end(), t.begin(), t.end());
  }
  g.finish();
  // The cache holds the prompt and every token but the last.
  EXPECT_EQ(s.n_past(), int64_t(prompt.size() + r.tokens.size()) - 1);
  r.stats = g.stats();
  return r;
}

TEST_P(Speculative, SameTokensAsPlainDecoding) {
  for (const char* arch : {"llama", "gemma3"}) {
    auto model = Model::load(test::synth_tiny(arch, "spec"));
    // A prompt that repeats itself, so that n-gram lookup has guesses.
    V prompt = {1, 17, 300, 42, 5, 200, 99, 260, 3, 77};
    for (int i = 0; i < 3; ++i) prompt.insert(prompt.end(), prompt.begin() + 1, prompt.begin() + 10);
    for (const bool on_backend : {true, false}) {
      for (const float temp : {0.0f, 0.9f}) {
        SCOPED_TRACE(std::string(arch) + (on_backend ? " backend" : " host") + " temp " + std::to_string(temp));
        const int n = 40;
        const Generated plain = generate(*model, b(), prompt, n, on_backend, temp, nullptr);
        ASSERT_EQ(plain.tokens.size(), size_t(n));
        ReplayProposer replay(prompt.size(), plain.tokens);
        const Generated rp = generate(*model, b(), prompt, n, on_backend, temp, &replay);
        EXPECT_EQ(rp.tokens, plain.tokens);
        EXPECT_GT(rp.stats.accepted, 0);
        EXPECT_LT(rp.stats.accepted, rp.stats.drafted);  // some refused too
        EXPECT_LT(rp.stats.steps, plain.stats.steps);
        NgramProposer ngram;
        const Generated ng = generate(*model, b(), prompt, n, on_backend, temp, &ngram);
        EXPECT_EQ(ng.tokens, plain.tokens);
        if (temp == 0) EXPECT_GT(ng.stats.accepted, 0);  // greedy, a random model's text repeats itself
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Speculative, ::testing::ValuesIn(test::backend_names()), test::ParamName());

}  // namespace
}  // namespace weir
