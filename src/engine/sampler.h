// Sampler: picks the next token from a row of logits, for weir run and
// chat: the token sampler's filters and draw (backend/token_sampler.h, where
// the chain is written down), with two things on top:
//   * repeat_penalty, first: for each distinct token among the last
//     repeat_last_n accepted ones, logit > 0 ? logit / penalty : logit *
//     penalty (once per distinct token, however often it occurred). 1 or
//     repeat_last_n == 0 disables it;
//   * the draw's uniform number: a 53-bit double from xoshiro256**, seeded by
//     splitmix64(seed), so the same seed, params, logits and accepted tokens
//     give the same tokens on every platform (up to last-bit differences of
//     the C library's expf). Greedy rows and rows with one token left take
//     no number.
// A row with no finite logit raises weir::Error.
//
// The caller feeds every token that belongs to the context into accept() (the
// prompt's and the sampled ones); sample() does not accept on its own.
// Buffers are sized on first use; sample() then does not allocate.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/token_sampler.h"
#include "engine/rng.h"

namespace weir {

struct SamplerParams {
  float temperature = 0.8f;  // <= 0: greedy
  int top_k = 40;            // <= 0: disabled
  float top_p = 0.95f;       // in (0, 1]; 1: disabled
  float min_p = 0.05f;       // in [0, 1]; 0: disabled
  float repeat_penalty = 1.0f;  // > 0; 1: disabled
  int repeat_last_n = 64;       // >= 0; 0: disabled
  uint64_t seed = 0;            // 0: random from std::random_device
};


class Sampler {
 public:
  // Throws weir::Error naming the parameter when one is out of range.
  Sampler(SamplerParams params, int n_vocab);

  // logits: n_vocab values. Returns a token id in [0, n_vocab).
  int32_t sample(const float* logits);

  // The tokens the chain would draw from for these logits, with their final
  // probabilities, sorted by probability (then id). Does not advance the
  // random generator. The span is valid until the next call on this sampler.
  // Greedy mode gives the single argmax token with p = 1.
  std::span<const TokenCandidate> candidates(const float* logits);

  // Records a token of the context for the repetition penalty.
  // Throws weir::Error when the token is outside [0, n_vocab).
  void accept(int32_t token);

  // Forgets the accepted tokens and restarts the random generator from the
  // seed (for seed 0: the random seed chosen at construction), so the same
  // inputs give the same tokens again.
  void reset();

  const SamplerParams& params() const { return params_; }
  int n_vocab() const { return n_vocab_; }
  // The seed in use (the drawn one when params.seed was 0).
  uint64_t seed() const { return seed_; }

 private:
  // Runs penalty and filters (rows_); returns how many tokens were kept.
  size_t filter(const float* logits);
  void seed_rng();

  SamplerParams params_;
  int n_vocab_;
  uint64_t seed_;
  Rng rng_;

  TokenSampler rows_;                 // the filters and the draw (backend/token_sampler.h)
  std::vector<int32_t> history_;      // ring of the last repeat_last_n tokens
  size_t history_head_ = 0;           // next slot to write
  size_t history_count_ = 0;
  std::vector<int32_t> penalized_;    // scratch: distinct history tokens
};

}  // namespace weir
