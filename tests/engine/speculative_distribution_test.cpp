// Sampled speculative decoding follows the target's distribution (issue 48,
// item 2): on a tiny model, the first three tokens after a prompt, over
// many seeds, with and without guesses (a draft model, here the target
// itself guessing greedily, so that guesses are kept about half the time),
// compared by a two-sample chi-square test. The seeds of the two sides
// differ: with the same seed the tokens would be the same (the generator
// takes the draws plain decoding takes), which would prove nothing here.
// The wrong rule of keeping every guess must fail the same test.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <tuple>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "engine/draft_model_proposer.h"
#include "engine/generator.h"
#include "engine/session.h"
#include "model/model.h"
#include "tiny_synth.h"

namespace weir {
namespace {

using V = std::vector<int32_t>;
using Triple = std::tuple<int32_t, int32_t, int32_t>;

// Two-sample chi-square over equal sample sizes; bins with fewer than 10
// in both samples pooled. *dof gets the degrees of freedom.
double chi_square(const std::map<Triple, int>& a, const std::map<Triple, int>& b, int* dof) {
  std::map<Triple, std::pair<int, int>> both;
  for (auto& [k, n] : a) both[k].first += n;
  for (auto& [k, n] : b) both[k].second += n;
  double stat = 0;
  int bins = 0, pa = 0, pb = 0;
  for (auto& [k, n] : both) {
    if (n.first + n.second < 10) {
      pa += n.first, pb += n.second;
      continue;
    }
    stat += double(n.first - n.second) * (n.first - n.second) / (n.first + n.second);
    ++bins;
  }
  if (pa + pb > 0) stat += double(pa - pb) * (pa - pb) / (pa + pb), ++bins;
  *dof = bins - 1;
  return stat;
}

TEST(SpeculativeDistribution, SampledTokensFollowTheTarget) {
  auto model = Model::load(test::synth_tiny("llama", "specdist"));
  CpuBackend cpu(2);
  SessionParams sp;
  sp.n_ctx = 32;
  sp.n_batch = 16;
  Session target(*model, cpu, sp), draft(*model, cpu, sp);
  DraftModelProposer proposer(draft, model->hparams().n_vocab);
  const V prompt = {1, 17, 300, 42, 5, 200, 99, 260, 3, 77};
  GeneratorSampling how;
  how.on_backend = true;
  how.backend.temperature = 1.5f;  // flatter than the model: several likely tokens
  how.backend.top_k = 4;
  how.backend.top_p = 1.0f;
  how.backend.min_p = 0.0f;
  const int n = 2000;
  std::map<Triple, int> plain, spec, wrong;
  int64_t drafted = 0, accepted = 0;
  for (int i = 0; i < n; ++i) {
    for (const bool with : {false, true}) {
      target.reset();
      how.backend.seed = uint64_t(with ? n + 1 + i : 1 + i);
      Generator g(target, how, with ? &proposer : nullptr, {.draft_min = 2, .draft_max = 2});
      V t = {g.start(prompt)};
      while (t.size() < 3) {
        const V more = g.next(3 - int(t.size()));
        t.insert(t.end(), more.begin(), more.end());
      }
      g.finish();
      (with ? spec : plain)[{t[0], t[1], t[2]}]++;
      if (with) {
        drafted += g.stats().drafted;
        accepted += g.stats().accepted;
        // Keeping every guess: the first token, then the draft's two.
        V ctx = prompt;
        ctx.push_back(t[0]);
        const V guess = proposer.propose(ctx, 2);
        ASSERT_EQ(guess.size(), 2u);
        wrong[{t[0], guess[0], guess[1]}]++;
      }
    }
  }
  // Guesses both kept and refused, often enough to matter.
  EXPECT_GT(accepted, drafted / 5);
  EXPECT_LT(accepted, drafted * 4 / 5);
  int dof = 0;
  const double stat = chi_square(plain, spec, &dof);
  const double bound = dof + 6 * std::sqrt(2.0 * dof);  // ~6 sigma over the mean
  EXPECT_LT(stat, bound) << "dof " << dof;
  int dof_wrong = 0;
  const double stat_wrong = chi_square(plain, wrong, &dof_wrong);
  EXPECT_GT(stat_wrong, dof_wrong + 6 * std::sqrt(2.0 * dof_wrong)) << "dof " << dof_wrong;
  std::printf("chi-square %.1f (%d dof, bound %.1f); keeping every guess: %.1f (%d dof); %lld of %lld guesses kept\n",
              stat, dof, bound, stat_wrong, dof_wrong, static_cast<long long>(accepted), static_cast<long long>(drafted));
}

}  // namespace
}  // namespace weir
