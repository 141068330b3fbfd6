// Sampler: picks the next token from a row of logits.
//
// The chain follows llama.cpp's default order:
//   repetition penalty -> top-k -> top-p -> min-p -> temperature -> draw
// with the filters (top-k, top-p, min-p) computed on the penalized logits at
// temperature 1, and temperature applied only to the final draw.
//
//   * temperature <= 0: greedy. Argmax of the penalized logits, lowest id on
//     ties; no filters, no randomness.
//   * repeat_penalty: for each distinct token among the last repeat_last_n
//     accepted ones, logit > 0 ? logit / penalty : logit * penalty (once per
//     distinct token, however often it occurred). 1 or repeat_last_n == 0
//     disables it.
//   * top_k: keep the k highest logits (ties at the boundary: lowest ids win);
//     k <= 0 or k >= n_vocab disables it.
//   * top_p: keep the smallest prefix of the distribution sorted by
//     probability (then by id) whose cumulative probability >= top_p, at
//     least one token; 1 disables it. Probabilities are the softmax over the
//     tokens top-k kept.
//   * min_p: drop tokens whose probability < min_p * (highest probability);
//     0 disables it.
//   * draw: softmax((logit - max) / temperature) over the kept tokens, and an
//     inverse-CDF draw with a 53-bit uniform double from xoshiro256**, seeded
//     by splitmix64(seed). The kept tokens are in a deterministic order (by
//     probability when top-k or top-p ran, by id otherwise), so the same
//     seed, params, logits and accepted tokens give the same tokens on every
//     platform (up to last-bit differences of the C library's expf).
//
// NaN logits count as -inf (never picked), +inf as the largest float. A row
// with no finite logit raises weir::Error.
//
// The caller feeds every token that belongs to the context into accept() (the
// prompt's and the sampled ones); sample() does not accept on its own.
// Buffers are sized once in the constructor; sample() does not allocate.
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
