// Verifying guessed tokens (engine/draft_verify.h). Greedy: hand-written
// cases. Sampled: generation with guesses must give the target's own
// distribution; a chi-square test over the first two tokens of many
// generations, on a tiny "model" (next-token probabilities that depend on
// the last token), for a proposer with a distribution (a draft model) and
// one without (n-gram guesses). The same statistic on a wrong rule (every
// guess kept) must be far over the bound, so the test can fail.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <functional>
#include <vector>

#include "core/error.h"
#include "engine/draft_verify.h"
#include "engine/rng.h"

namespace weir {
namespace {

using V = std::vector<int32_t>;

TEST(DraftVerify, GreedyKeepsTheAgreeingPrefix) {
  auto v = verify_greedy(V{4, 5, 6}, V{4, 5, 9, 2});
  EXPECT_EQ(v.accepted, 2);
  EXPECT_EQ(v.next, 9);
  v = verify_greedy(V{4, 5}, V{4, 5, 7});  // all kept, then the bonus token
  EXPECT_EQ(v.accepted, 2);
  EXPECT_EQ(v.next, 7);
  v = verify_greedy(V{1}, V{3, 8});
  EXPECT_EQ(v.accepted, 0);
  EXPECT_EQ(v.next, 3);
  v = verify_greedy(V{}, V{6});  // no guesses: plain decoding
  EXPECT_EQ(v.accepted, 0);
  EXPECT_EQ(v.next, 6);
  EXPECT_THROW(verify_greedy(V{1, 2}, V{1, 2}), Error);
}

constexpr int kV = 6;
using Row = std::array<float, kV>;

// Rows of probabilities for each "last token" (and one for the start).
std::vector<Row> random_rows(uint64_t seed) {
  Rng rng(seed);
  std::vector<Row> rows(kV + 1);
  for (Row& r : rows) {
    double s = 0;
    for (float& x : r) s += (x = float(0.05 + rng.next_double() * rng.next_double()));
    for (float& x : r) x = float(x / s);
  }
  return rows;
}

const Row& row_after(const std::vector<Row>& rows, const V& seq) { return rows[seq.empty() ? 0 : size_t(seq.back() + 1)]; }

// Chi-square of the first two tokens of n generations against the target.
// step(seq, rng) appends one verify step's tokens to seq.
double chi_square(const std::vector<Row>& P, int n, const std::function<void(V&, Rng&)>& step) {
  std::vector<double> count(kV * kV, 0.0);
  Rng rng(12345);
  for (int i = 0; i < n; ++i) {
    V seq;
    while (seq.size() < 2) step(seq, rng);
    count[size_t(seq[0] * kV + seq[1])] += 1;
  }
  double chi2 = 0;
  for (int a = 0; a < kV; ++a)
    for (int b = 0; b < kV; ++b) {
      const double e = double(n) * P[0][size_t(a)] * P[size_t(a + 1)][size_t(b)];
      const double o = count[size_t(a * kV + b)];
      chi2 += (o - e) * (o - e) / e;
    }
  return chi2;
}

// 35 degrees of freedom: mean 35, sd 8.4; 100 is past p = 1e-9.
constexpr double kChi2Bound = 100.0;
constexpr int kTrials = 60000;

// One step with k guesses from a proposer: with a distribution (q rows
// given, guesses drawn from them) or without (guess(seq) a fixed token).
void spec_step(const std::vector<Row>& P, const std::vector<Row>* Q, int k, V& seq, Rng& rng, bool keep_all = false) {
  V guesses, ctx = seq;
  std::vector<float> p, q;
  for (int i = 0; i < k; ++i) {
    int32_t g;
    if (Q) {
      const Row& qr = row_after(*Q, ctx);
      q.insert(q.end(), qr.begin(), qr.end());
      double u = rng.next_double(), c = 0;
      g = kV - 1;
      for (int t = 0; t < kV; ++t)
        if (u < (c += qr[size_t(t)])) {
          g = t;
          break;
        }
    } else {
      g = int32_t((ctx.size() * 3 + 1 + (ctx.empty() ? 0 : ctx.back())) % kV);  // any guess at all
    }
    const Row& pr = row_after(P, ctx);
    p.insert(p.end(), pr.begin(), pr.end());
    guesses.push_back(g);
    ctx.push_back(g);
  }
  const Row& last = row_after(P, ctx);
  p.insert(p.end(), last.begin(), last.end());
  if (keep_all) {  // the wrong rule
    seq.insert(seq.end(), guesses.begin(), guesses.end());
    return;
  }
  const DraftVerdict v = verify_sampled(guesses, p, q, kV, rng);
  seq.insert(seq.end(), guesses.begin(), guesses.begin() + v.accepted);
  seq.push_back(v.next);
}

TEST(DraftVerify, SampledFollowsTheTargetsDistribution) {
  const std::vector<Row> P = random_rows(1), Q = random_rows(2);
  // Without guesses (plain sampling through the same code): the baseline.
  const double plain = chi_square(P, kTrials, [&](V& s, Rng& r) { spec_step(P, nullptr, 0, s, r); });
  const double draft = chi_square(P, kTrials, [&](V& s, Rng& r) { spec_step(P, &Q, 3, s, r); });
  const double ngram = chi_square(P, kTrials, [&](V& s, Rng& r) { spec_step(P, nullptr, 2, s, r); });
  const double same = chi_square(P, kTrials, [&](V& s, Rng& r) { spec_step(P, &P, 2, s, r); });  // q = p: all kept
  const double wrong = chi_square(P, kTrials, [&](V& s, Rng& r) { spec_step(P, &Q, 2, s, r, true); });
  std::printf("chi-square (35 dof): plain %.1f, draft %.1f, n-gram %.1f, draft = target %.1f; keeping every guess %.1f\n",
              plain, draft, ngram, same, wrong);
  EXPECT_LT(plain, kChi2Bound);
  EXPECT_LT(draft, kChi2Bound);
  EXPECT_LT(ngram, kChi2Bound);
  EXPECT_LT(same, kChi2Bound);
  EXPECT_GT(wrong, 10 * kChi2Bound);  // the statistic sees a wrong rule
}

TEST(DraftVerify, RefusesMisshapedInput) {
  Rng rng(1);
  const std::vector<float> p(3 * kV, 1.0f / kV), q(2 * kV, 1.0f / kV);
  EXPECT_NO_THROW(verify_sampled(V{1, 2}, p, q, kV, rng));
  EXPECT_THROW(verify_sampled(V{1, 2, 3}, p, q, kV, rng), Error);          // rows for 2 guesses
  EXPECT_THROW(verify_sampled(V{1, 2}, p, std::vector<float>(kV), kV, rng), Error);
  EXPECT_THROW(verify_sampled(V{1, kV}, p, q, kV, rng), Error);            // not a token
  EXPECT_THROW(verify_sampled(V{}, p, {}, 0, rng), Error);
}

}  // namespace
}  // namespace weir
