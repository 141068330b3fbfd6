// Micro-benchmark of the host sampler (engine/sampler.h) over Gemma 3's
// 262,144 logits with each filter setting: ms per token, 20 tokens after
// one to warm up. Printed, not asserted; tests/engine/sampler_test.cpp
// checks what it draws.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "engine/sampler.h"

namespace weir {
namespace {

TEST(Sampler, LargeVocabMsPerToken) {
  constexpr int n = 262144;
  std::mt19937 g(12345);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> logits(n);
  for (float& x : logits) x = d(g);
  struct Case {
    const char* name;
    int top_k;
    float top_p, min_p, temperature;
  };
  const Case cases[] = {
      {"defaults", 40, 0.95f, 0.05f, 0.8f},  {"no top-k", 0, 0.95f, 0.05f, 0.8f},
      {"top-p only", 0, 0.95f, 0.0f, 1.0f},  {"min-p only", 0, 1.0f, 0.05f, 1.0f},
      {"no filters", 0, 1.0f, 0.0f, 1.0f},   {"greedy", 0, 1.0f, 0.0f, 0.0f},
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
    s.accept(s.sample(logits.data()));  // warm-up
    const int iters = 20;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) s.accept(s.sample(logits.data()));
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("sample() over 262144 logits, %-10s: %.3f ms/token\n", c.name, ms / iters);
  }
}

}  // namespace
}  // namespace weir
