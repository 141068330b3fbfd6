#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"

namespace weir {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

SamplerParams no_filters(float temperature, uint64_t seed = 1) {
  SamplerParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  p.seed = seed;
  return p;
}

// Brute-force reference of the whole chain, in double precision, with a full
// sort: id -> final probability.
std::map<int, double> reference(const std::vector<float>& logits, const SamplerParams& sp,
                                const std::vector<int>& accepted = {}) {
  const int n = int(logits.size());
  std::vector<double> l(logits.begin(), logits.end());
  if (sp.repeat_penalty != 1.0f && sp.repeat_last_n > 0) {
    std::set<int> recent;
    const size_t from = accepted.size() > size_t(sp.repeat_last_n) ? accepted.size() - sp.repeat_last_n : 0;
    for (size_t i = from; i < accepted.size(); ++i) recent.insert(accepted[i]);
    for (int t : recent) l[t] = l[t] > 0 ? l[t] / sp.repeat_penalty : l[t] * sp.repeat_penalty;
  }
  if (sp.temperature <= 0) {
    int best = 0;
    for (int i = 1; i < n; ++i)
      if (l[i] > l[best]) best = i;
    return {{best, 1.0}};
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  if (sp.top_k > 0 && sp.top_k < n) order.resize(sp.top_k);

  auto softmax = [&](const std::vector<int>& ids, double t) {
    double mx = l[ids[0]];
    for (int id : ids) mx = std::max(mx, l[id]);
    std::vector<double> p;
    double s = 0;
    for (int id : ids) s += std::exp((l[id] - mx) / t);
    for (int id : ids) p.push_back(std::exp((l[id] - mx) / t) / s);
    return p;
  };

  if (sp.top_p < 1.0f) {
    std::vector<double> p = softmax(order, 1.0);
    double cum = 0;
    size_t keep = order.size();
    for (size_t i = 0; i < order.size(); ++i) {
      cum += p[i];
      if (cum >= sp.top_p) {
        keep = i + 1;
        break;
      }
    }
    order.resize(keep);
  }
  if (sp.min_p > 0) {
    std::vector<double> p = softmax(order, 1.0);
    const double pmax = *std::max_element(p.begin(), p.end());
    std::vector<int> kept;
    for (size_t i = 0; i < order.size(); ++i)
      if (p[i] >= sp.min_p * pmax) kept.push_back(order[i]);
    order = kept;
  }
  std::vector<double> p = softmax(order, sp.temperature);
  std::map<int, double> out;
  for (size_t i = 0; i < order.size(); ++i) out[order[i]] = p[i];
  return out;
}

std::map<int, double> to_map(std::span<const TokenCandidate> c) {
  std::map<int, double> m;
  for (const auto& t : c) m[t.id] = t.p;
  return m;
}

std::set<int> keys(const std::map<int, double>& m) {
  std::set<int> s;
  for (const auto& [k, v] : m) s.insert(k);
  return s;
}

std::vector<float> random_logits(int n, float scale, uint32_t seed, bool quantize = false) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = d(g);
    if (quantize) x = std::round(x * 4.0f) / 4.0f;  // many ties
  }
  return v;
}

// Upper chi-square quantile for a tail of about 1e-6 (Wilson-Hilferty).
double chi2_critical(int df) {
  const double z = 4.75;
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

// Draws `draws` tokens and checks their frequencies against `expected`
// (id -> probability) with a chi-square test; no draw may fall outside it.
void expect_distribution(Sampler& s, const std::vector<float>& logits, const std::map<int, double>& expected,
                         int draws) {
  std::map<int, int> counts;
  for (int i = 0; i < draws; ++i) counts[s.sample(logits.data())]++;
  for (const auto& [id, n] : counts) ASSERT_TRUE(expected.count(id)) << "drew token " << id << " outside the kept set";
  double chi2 = 0;
  for (const auto& [id, p] : expected) {
    const double e = p * draws;
    const double o = counts.count(id) ? counts[id] : 0;
    chi2 += (o - e) * (o - e) / e;
  }
  const int df = int(expected.size()) - 1;
  EXPECT_LT(chi2, chi2_critical(df)) << "df=" << df;
}

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 3.0f};
  for (float t : {0.0f, -1.0f, -0.0f}) {
    SamplerParams p;  // filters on, but greedy ignores them
    p.temperature = t;
    p.top_k = 2;
    p.min_p = 1.0f;
    p.top_p = 0.1f;
    Sampler s(p, int(logits.size()));
    for (int i = 0; i < 10; ++i) EXPECT_EQ(s.sample(logits.data()), 1);
    auto c = s.candidates(logits.data());
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].id, 1);
    EXPECT_EQ(c[0].p, 1.0f);
  }
}

TEST(Sampler, GreedyOnLargeRandomVocab) {
  const auto logits = random_logits(50000, 4.0f, 7);
  Sampler s(no_filters(0.0f), int(logits.size()));
  const int expect = int(std::max_element(logits.begin(), logits.end()) - logits.begin());
  EXPECT_EQ(s.sample(logits.data()), expect);
}

TEST(Sampler, NaNAndInfLogits) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  {
    const std::vector<float> logits = {nan, 1.0f, nan, 0.5f};
    Sampler g(no_filters(0.0f), 4);
    EXPECT_EQ(g.sample(logits.data()), 1);
    Sampler s(no_filters(1.0f, 3), 4);
    for (int i = 0; i < 2000; ++i) {
      const int t = s.sample(logits.data());
      EXPECT_TRUE(t == 1 || t == 3) << t;
    }
  }
  {
    const std::vector<float> logits = {1.0f, kInf, 2.0f, -kInf};
    Sampler s(no_filters(1.0f, 3), 4);
    for (int i = 0; i < 100; ++i) EXPECT_EQ(s.sample(logits.data()), 1);
  }
  {
    const std::vector<float> logits = {-kInf, nan, -kInf};
    Sampler g(no_filters(0.0f), 3);
    EXPECT_THROW(g.sample(logits.data()), Error);
    Sampler s(SamplerParams{}, 3);
    EXPECT_THROW(s.sample(logits.data()), Error);
  }
}

TEST(Sampler, SameSeedSameTokensDifferentSeedsDiffer) {
  const auto logits = random_logits(1000, 1.0f, 11);
  SamplerParams p = no_filters(1.0f, 42);
  p.top_k = 100;
  Sampler a(p, 1000), b(p, 1000);
  p.seed = 43;
  Sampler c(p, 1000);
  std::vector<int> sa, sb, sc;
  for (int i = 0; i < 500; ++i) {
    sa.push_back(a.sample(logits.data()));
    sb.push_back(b.sample(logits.data()));
    sc.push_back(c.sample(logits.data()));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
  int same = 0;
  for (int i = 0; i < 500; ++i) same += sa[i] == sc[i];
  EXPECT_LT(same, 100);

  // reset() replays the sequence.
  a.reset();
  for (int i = 0; i < 500; ++i) ASSERT_EQ(a.sample(logits.data()), sa[i]) << i;

  // candidates() does not advance the generator.
  b.reset();
  b.candidates(logits.data());
  EXPECT_EQ(b.sample(logits.data()), sa[0]);
}

TEST(Sampler, SeedZeroDrawsARandomSeed) {
  SamplerParams p = no_filters(1.0f, 0);
  Sampler a(p, 10), b(p, 10);
  EXPECT_NE(a.seed(), 0u);
  EXPECT_NE(a.seed(), b.seed());
  p.seed = a.seed();
  Sampler c(p, 10);
  const auto logits = random_logits(10, 1.0f, 5);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.sample(logits.data()), c.sample(logits.data()));
}

TEST(Sampler, FrequenciesMatchSoftmaxWithTemperature) {
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, 1.5f, -1.0f, 0.7f};
  for (float t : {0.7f, 1.0f, 1.6f}) {
    SCOPED_TRACE(t);
    SamplerParams p = no_filters(t, 1234);
    Sampler s(p, int(logits.size()));
    // Analytic softmax(logits / t).
    std::map<int, double> expected;
    double z = 0;
    for (float l : logits) z += std::exp(double(l) / t);
    for (size_t i = 0; i < logits.size(); ++i) expected[int(i)] = std::exp(double(logits[i]) / t) / z;
    expect_distribution(s, logits, expected, 200000);
  }
}

TEST(Sampler, FrequenciesMatchFilteredDistribution) {
  const auto logits = random_logits(64, 1.5f, 99);
  SamplerParams p;
  p.temperature = 1.3f;
  p.top_k = 12;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  p.seed = 77;
  const auto expected = reference(logits, p);
  ASSERT_GT(expected.size(), 3u);
  Sampler s(p, int(logits.size()));
  expect_distribution(s, logits, expected, 200000);

  // Only min-p (kept tokens stay in id order for the draw).
  SamplerParams q = no_filters(0.9f, 78);
  q.min_p = 0.1f;
  const auto expected_q = reference(logits, q);
  ASSERT_GT(expected_q.size(), 3u);
  Sampler sq(q, int(logits.size()));
  expect_distribution(sq, logits, expected_q, 200000);
}

TEST(Sampler, TopKKeepsExactlyTheKBest) {
  const auto logits = random_logits(500, 2.0f, 3);
  for (int k : {1, 2, 40, 499, 500, 1000}) {
    SamplerParams p = no_filters(1.0f);
    p.top_k = k;
    Sampler s(p, 500);
    auto got = to_map(s.candidates(logits.data()));
    EXPECT_EQ(int(got.size()), std::min(k, 500));
    EXPECT_EQ(keys(got), keys(reference(logits, p))) << "k=" << k;
  }
  // Ties at the boundary go to the lowest ids.
  const std::vector<float> ties = {1.0f, 2.0f, 1.0f, 2.0f, 1.0f, 0.0f};
  SamplerParams p = no_filters(1.0f);
  p.top_k = 3;
  Sampler s(p, 6);
  EXPECT_EQ(keys(to_map(s.candidates(ties.data()))), (std::set<int>{0, 1, 3}));

  // Large k (selection over a full copy rather than a heap), with many ties.
  const auto big = random_logits(20000, 2.0f, 4, /*quantize=*/true);
  for (int k : {4096, 4097, 10000}) {
    SamplerParams q = no_filters(1.0f);
    q.top_k = k;
    Sampler sb(q, 20000);
    auto got = to_map(sb.candidates(big.data()));
    EXPECT_EQ(int(got.size()), k);
    EXPECT_EQ(keys(got), keys(reference(big, q))) << "k=" << k;
  }

  // -inf tokens fill up k when too few are finite, but are never drawn.
  const std::vector<float> masked = {-kInf, -kInf, 1.0f, -kInf};
  p.top_k = 2;
  Sampler sm(p, 4);
  EXPECT_EQ(keys(to_map(sm.candidates(masked.data()))), (std::set<int>{0, 2}));
  for (int i = 0; i < 100; ++i) EXPECT_EQ(sm.sample(masked.data()), 2);
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingP) {
  // Probabilities 0.5, 0.25, 0.125, 0.125 (logits are log2 steps).
  const std::vector<float> logits = {float(std::log(0.125)), float(std::log(0.5)), float(std::log(0.25)),
                                     float(std::log(0.125))};
  auto kept = [&](float top_p) {
    SamplerParams p = no_filters(1.0f);
    p.top_p = top_p;
    Sampler s(p, 4);
    return keys(to_map(s.candidates(logits.data())));
  };
  EXPECT_EQ(kept(0.1f), (std::set<int>{1}));         // at least one token
  EXPECT_EQ(kept(0.6f), (std::set<int>{1, 2}));      // 0.5 < 0.6 <= 0.75
  EXPECT_EQ(kept(0.8f), (std::set<int>{0, 1, 2}));   // tie 0 vs 3: lowest id first
  EXPECT_EQ(kept(1.0f), (std::set<int>{0, 1, 2, 3}));

  for (int n : {300, 5000}) {
    const auto big = random_logits(n, 1.0f, uint32_t(n));
    for (float top_p : {0.3f, 0.9f, 0.99f}) {
      SamplerParams p = no_filters(1.0f);
      p.top_p = top_p;
      Sampler s(p, n);
      auto got = s.candidates(big.data());
      EXPECT_EQ(keys(to_map(got)), keys(reference(big, p))) << "n=" << n << " top_p=" << top_p;
      for (size_t i = 1; i < got.size(); ++i) EXPECT_GE(got[i - 1].p, got[i].p);
    }
  }
}

TEST(Sampler, MinPDropsTokensBelowFractionOfMax) {
  // Probabilities proportional to 1, 0.5, 0.2, 0.04, 0.01.
  const std::vector<float> logits = {float(std::log(0.2)), float(std::log(1.0)), float(std::log(0.04)),
                                     float(std::log(0.5)), float(std::log(0.01))};
  auto kept = [&](float min_p) {
    SamplerParams p = no_filters(1.0f);
    p.min_p = min_p;
    Sampler s(p, 5);
    return keys(to_map(s.candidates(logits.data())));
  };
  EXPECT_EQ(kept(0.0f), (std::set<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(kept(0.03f), (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(kept(0.3f), (std::set<int>{1, 3}));
  EXPECT_EQ(kept(1.0f), (std::set<int>{1}));
}

// All filter combinations against the brute-force reference: same kept set,
// same final probabilities.
TEST(Sampler, FilterChainMatchesBruteForce) {
  std::mt19937 g(2024);
  const int ks[] = {0, 1, 5, 40, 300, 5000};  // 5000: select instead of heap
  const float ps[] = {1.0f, 0.5f, 0.9f, 0.95f, 0.995f};
  const float mins[] = {0.0f, 0.01f, 0.05f, 0.2f};
  const float temps[] = {0.5f, 1.0f, 1.7f};
  const float scales[] = {0.5f, 2.0f, 6.0f};
  const int sizes[] = {7, 200, 3000, 20000};
  int trials = 0;
  for (int n : sizes) {
    for (int trial = 0; trial < 60; ++trial, ++trials) {
      SamplerParams p;
      p.top_k = ks[g() % 6];
      p.top_p = ps[g() % 5];
      p.min_p = mins[g() % 4];
      p.temperature = temps[g() % 3];
      p.repeat_penalty = (g() % 2) ? 1.0f : 1.3f;
      p.repeat_last_n = 16;
      p.seed = g() + 1;
      const auto logits = random_logits(n, scales[g() % 3], g(), /*quantize=*/g() % 3 == 0);
      std::vector<int> accepted;
      for (int i = 0; i < 30; ++i) accepted.push_back(int(g() % uint32_t(n)));

      Sampler s(p, n);
      for (int t : accepted) s.accept(t);
      const auto want = reference(logits, p, accepted);
      const auto got_span = s.candidates(logits.data());
      const auto got = to_map(got_span);
      SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(p.top_k) + " p=" + std::to_string(p.top_p) +
                   " min_p=" + std::to_string(p.min_p) + " t=" + std::to_string(p.temperature));
      ASSERT_EQ(keys(got), keys(want));
      double total = 0;
      for (const auto& [id, pr] : want) {
        EXPECT_NEAR(got.at(id), pr, 1e-5 + 1e-4 * pr) << id;
        total += got.at(id);
      }
      EXPECT_NEAR(total, 1.0, 1e-4);
      for (size_t i = 1; i < got_span.size(); ++i) EXPECT_GE(got_span[i - 1].p, got_span[i].p);
      // Sampled tokens come from the kept set.
      for (int i = 0; i < 20; ++i) ASSERT_TRUE(want.count(s.sample(logits.data())));
    }
  }
  EXPECT_EQ(trials, 240);
}

TEST(Sampler, RepetitionPenaltyMath) {
  const std::vector<float> logits = {2.0f, -2.0f, 1.0f, 0.5f, 3.0f};
  auto penalized = [&](Sampler& s) {
    std::map<int, float> m;
    for (const auto& c : s.candidates(logits.data())) m[c.id] = c.logit;
    return m;
  };
  SamplerParams p = no_filters(1.0f);
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = 64;
  {
    Sampler s(p, 5);
    s.accept(0);
    s.accept(1);
    s.accept(0);  // repeated: still divided only once
    auto m = penalized(s);
    EXPECT_EQ(m[0], 1.0f);
    EXPECT_EQ(m[1], -4.0f);
    EXPECT_EQ(m[2], 1.0f);
    EXPECT_EQ(m[3], 0.5f);
    EXPECT_EQ(m[4], 3.0f);
    // Final probabilities are softmax of the penalized logits.
    const double z = std::exp(1.0) + std::exp(-4.0) + std::exp(1.0) + std::exp(0.5) + std::exp(3.0);
    for (const auto& c : s.candidates(logits.data()))
      EXPECT_NEAR(c.p, std::exp(double(m[c.id])) / z, 1e-6);
    s.reset();  // forgets the history
    m = penalized(s);
    EXPECT_EQ(m[0], 2.0f);
    EXPECT_EQ(m[1], -2.0f);
  }
  {
    // Only the last repeat_last_n accepted tokens count.
    p.repeat_last_n = 2;
    Sampler s(p, 5);
    for (int t : {0, 1, 4}) s.accept(t);
    auto m = penalized(s);
    EXPECT_EQ(m[0], 2.0f);
    EXPECT_EQ(m[1], -4.0f);
    EXPECT_EQ(m[4], 1.5f);
  }
  {
    // A penalty below 1 raises repeated tokens.
    p.repeat_penalty = 0.5f;
    p.repeat_last_n = 64;
    Sampler s(p, 5);
    s.accept(0);
    s.accept(1);
    auto m = penalized(s);
    EXPECT_EQ(m[0], 4.0f);
    EXPECT_EQ(m[1], -1.0f);
  }
  {
    // repeat_last_n = 0 disables it.
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 0;
    Sampler s(p, 5);
    s.accept(4);
    EXPECT_EQ(penalized(s)[4], 3.0f);
  }
  {
    // Greedy sees the penalty.
    SamplerParams gp = no_filters(0.0f);
    gp.repeat_penalty = 1.5f;
    const std::vector<float> two = {3.0f, 2.5f};
    Sampler s(gp, 2);
    EXPECT_EQ(s.sample(two.data()), 0);
    s.accept(0);  // 3 / 1.5 = 2 < 2.5
    EXPECT_EQ(s.sample(two.data()), 1);
  }
}

void expect_error(SamplerParams p, const std::string& name, int n_vocab = 10) {
  try {
    Sampler s(p, n_vocab);
    ADD_FAILURE() << "no error for bad " << name;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
}

TEST(Sampler, ValidatesParameters) {
  SamplerParams p;
  p.top_p = 0.0f;
  expect_error(p, "top_p");
  p.top_p = 1.5f;
  expect_error(p, "top_p");
  p.top_p = std::numeric_limits<float>::quiet_NaN();
  expect_error(p, "top_p");
  p = {};
  p.min_p = -0.1f;
  expect_error(p, "min_p");
  p.min_p = 1.1f;
  expect_error(p, "min_p");
  p = {};
  p.repeat_penalty = 0.0f;
  expect_error(p, "repeat_penalty");
  p.repeat_penalty = -1.0f;
  expect_error(p, "repeat_penalty");
  p = {};
  p.repeat_last_n = -1;
  expect_error(p, "repeat_last_n");
  p = {};
  p.temperature = std::numeric_limits<float>::quiet_NaN();
  expect_error(p, "temperature");
  p.temperature = kInf;
  expect_error(p, "temperature");
  expect_error(SamplerParams{}, "n_vocab", 0);

  // Negative temperature is greedy.
  p = {};
  p.temperature = -0.5f;
  Sampler s(p, 3);
  const std::vector<float> logits = {0.0f, 0.1f, 0.05f};
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(logits.data()), 1);

  EXPECT_THROW(s.accept(-1), Error);
  EXPECT_THROW(s.accept(3), Error);
  EXPECT_NO_THROW(s.accept(2));
}

// Every filter setting over Gemma 3's 262,144 logits draws a token of the
// vocabulary (the time a token takes: microbench/sampler_bench.cpp).
TEST(Sampler, LargeVocabDrawsInRange) {
  constexpr int n = 262144;
  const auto logits = random_logits(n, 3.0f, 12345);
  struct Case {
    const char* name;
    int top_k;
    float top_p, min_p, temperature;
  };
  const Case cases[] = {
      {"defaults", 40, 0.95f, 0.05f, 0.8f},
      {"no top-k", 0, 0.95f, 0.05f, 0.8f},
      {"top-p only", 0, 0.95f, 0.0f, 1.0f},
      {"min-p only", 0, 1.0f, 0.05f, 1.0f},
      {"no filters", 0, 1.0f, 0.0f, 1.0f},
      {"greedy", 0, 1.0f, 0.0f, 0.0f},
  };
  for (const auto& c : cases) {
    SamplerParams p;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    p.temperature = c.temperature;
    p.repeat_penalty = 1.1f;
    p.seed = 9;
    Sampler s(p, n);
    for (int i = 0; i < 20; ++i) {
      const int32_t t = s.sample(logits.data());
      ASSERT_GE(t, 0) << c.name;
      ASSERT_LT(t, n) << c.name;
      s.accept(t);
    }
  }
}

}  // namespace
}  // namespace weir
