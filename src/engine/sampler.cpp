#include "engine/sampler.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>

#include "core/error.h"

namespace weir {

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

[[noreturn]] void bad(const char* name, const std::string& rule, double got) {
  throw Error(std::string("sampler: ") + name + " must be " + rule + ", got " + num(got));
}

// Probability order: higher logit first, lower id on ties.
inline bool before(const TokenCandidate& a, const TokenCandidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

}  // namespace

Sampler::Sampler(SamplerParams params, int n_vocab) : params_(params), n_vocab_(n_vocab) {
  if (n_vocab <= 0) bad("n_vocab", "> 0", n_vocab);
  if (std::isnan(params.temperature) || std::isinf(params.temperature))
    bad("temperature", "finite (<= 0 means greedy)", params.temperature);
  if (params.temperature < 0) params_.temperature = 0;
  if (!(params.top_p > 0 && params.top_p <= 1)) bad("top_p", "in (0, 1]", params.top_p);
  if (!(params.min_p >= 0 && params.min_p <= 1)) bad("min_p", "in [0, 1]", params.min_p);
  if (!(params.repeat_penalty > 0) || std::isinf(params.repeat_penalty))
    bad("repeat_penalty", "finite and > 0 (1 disables it)", params.repeat_penalty);
  if (params.repeat_last_n < 0) bad("repeat_last_n", ">= 0 (0 disables it)", params.repeat_last_n);
  if (params.top_k < 0) params_.top_k = 0;

  seed_ = params.seed;
  if (seed_ == 0) {
    std::random_device rd;
    seed_ = (uint64_t(rd()) << 32) ^ uint64_t(rd());
    if (seed_ == 0) seed_ = 0x5eed;
  }
  seed_rng();

  history_.resize(size_t(params_.repeat_last_n));
  penalized_.reserve(size_t(params_.repeat_last_n));
}

void Sampler::seed_rng() { rng_.reseed(seed_); }

void Sampler::accept(int32_t token) {
  if (token < 0 || token >= n_vocab_)
    throw Error("sampler: accepted token " + std::to_string(token) + " is outside the vocabulary [0, " +
                std::to_string(n_vocab_) + ")");
  if (history_.empty()) return;
  history_[history_head_] = token;
  history_head_ = (history_head_ + 1) % history_.size();
  if (history_count_ < history_.size()) ++history_count_;
}

void Sampler::reset() {
  history_head_ = 0;
  history_count_ = 0;
  seed_rng();
}

size_t Sampler::filter(const float* logits) {
  // Distinct tokens of the penalty window, sorted by id.
  penalized_.clear();
  if (params_.repeat_penalty != 1.0f && history_count_ > 0) {
    penalized_.assign(history_.begin(), history_.begin() + std::ptrdiff_t(history_count_));
    std::sort(penalized_.begin(), penalized_.end());
    penalized_.erase(std::unique(penalized_.begin(), penalized_.end()), penalized_.end());
  }
  SamplingParams p;
  p.temperature = params_.temperature;
  p.top_k = params_.top_k;
  p.top_p = params_.top_p;
  p.min_p = params_.min_p;
  const size_t n = rows_.filter(logits, n_vocab_, p, penalized_, params_.repeat_penalty);
  if (n == 0) throw Error("sampler: every logit is -inf or NaN; nothing to sample");
  return n;
}

int32_t Sampler::sample(const float* logits) {
  const size_t n = filter(logits);
  if (n == 1) return rows_.candidates()[0].id;  // no draw taken
  return rows_.draw(n, rng_.next_double());
}

std::span<const TokenCandidate> Sampler::candidates(const float* logits) {
  const size_t n = filter(logits);
  TokenCandidate* c = rows_.candidates();
  if (!rows_.sorted()) std::sort(c, c + n, before);
  const double inv = 1.0 / rows_.weight_sum();
  for (size_t i = 0; i < n; ++i) c[i].p = float(double(c[i].p) * inv);
  return {c, n};
}

}  // namespace weir
