// Checking a proposer's k guesses against the target model (issue 48): the
// target's distributions at the k + 1 positions of one batched step (after
// each guess, and after the last) decide how many guesses stay and which
// token follows them, so that the output is what decoding without guesses
// gives: token for token when greedy, in distribution when sampled.
//
// Sampled, as Leviathan et al. / Chen et al. (2023): guess i (drawn by the
// proposer with probability q_i(x)) stays with probability min(1, p_i(x) /
// q_i(x)); at the first refusal the next token is drawn from
// max(0, p_i - q_i), normalized; when all k stay, the next is drawn from
// p_k. A proposer that guesses without a distribution (n-gram lookup) is
// the case q_i = one-hot at its guess: the guess stays with probability
// p_i(x), else the next is drawn from p_i without x.
#pragma once
#include <cstdint>
#include <span>

#include "engine/rng.h"

namespace weir {

struct DraftVerdict {
  int accepted = 0;   // guesses [0, accepted) are kept
  int32_t next = -1;  // then the target's own token
};

// Greedy: target_tokens[i] is the target's argmax after guess i - 1 (i = 0:
// after the sequence so far), k + 1 of them for k guesses.
DraftVerdict verify_greedy(std::span<const int32_t> guesses, std::span<const int32_t> target_tokens);

// Sampled. p: k + 1 rows of n_vocab probabilities (the target's, after the
// sampler's temperature and filters; each row sums to 1), row i after guess
// i - 1. q: k rows of the proposer's probabilities, or empty for a proposer
// that guesses without a distribution (q one-hot at each guess).
DraftVerdict verify_sampled(std::span<const int32_t> guesses, std::span<const float> p, std::span<const float> q,
                            int64_t n_vocab, Rng& rng);

}  // namespace weir
