// The token sampler: one row of logits to a token, the one implementation
// weir has on the CPU. The CPU backend's sample op runs it per row, the
// engine's Sampler (run, chat) adds the repetition penalty and its random
// generator, the batcher's host sampling adds OpenAI's penalties and
// log-probabilities; the CUDA sample op makes the same choices on the GPU
// (tests compare it with this one).
//
// The chain, llama.cpp's default order:
//   top-k -> top-p -> min-p -> temperature -> draw
// with the filters computed on the logits at temperature 1 and temperature
// applied to the draw alone:
//   * temperature <= 0: greedy, the argmax (lowest id on ties);
//   * top_k: the k highest logits (ties at the boundary: lowest ids win);
//     k <= 0 or k >= n_vocab: off;
//   * top_p: the smallest prefix of the probability order (then id) whose
//     cumulative probability reaches top_p, probabilities being the softmax
//     over what top-k kept; 1: off;
//   * min_p: drops tokens whose probability is below min_p times the
//     highest; 0: off. top-p and min-p both keep a prefix of the probability
//     order, so the result is the shorter one whatever the order they run in;
//   * draw: weights exp((logit - max) / temperature) over the kept tokens, in
//     a fixed order (by probability where a filter sorted, else by id), and
//     the first whose cumulative weight passes u * total, u in [0, 1).
// NaN logits count as -inf (never picked), +inf as the largest float.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace weir {

struct SamplingParams {
  float temperature = 0.8f;  // <= 0: greedy
  int top_k = 40;            // <= 0: off
  float top_p = 0.95f;       // in (0, 1]; 1: off
  float min_p = 0.05f;       // in [0, 1]; 0: off
};

// One token that survived the filters.
struct TokenCandidate {
  int32_t id;
  float logit;  // after any penalty, before temperature
  float p;      // its draw weight (unnormalized), or its probability where said
};

// Scratch for one row at a time (sized to the vocabulary on first use, then
// kept: sampling a row allocates nothing); not thread-safe, one a thread.
class TokenSampler {
 public:
  // Runs the filters on logits[0, n_vocab); the tokens in `penalized`
  // (sorted, distinct) first get llama.cpp's repetition penalty (logit > 0 ?
  // logit / penalty : logit * penalty). Returns how many tokens were kept
  // (0: no logit is finite), in candidates()[0, n) with their draw weights.
  size_t filter(const float* logits, int64_t n_vocab, const SamplingParams& p,
                const std::vector<int32_t>& penalized = {}, float penalty = 1.0f);
  // After filter(): the token whose cumulative weight first passes u times
  // the total, u in [0, 1).
  int32_t draw(size_t n, double u) const;
  // filter and draw; -1 when no logit is finite.
  int32_t sample(const float* logits, int64_t n_vocab, const SamplingParams& p, double u);

  TokenCandidate* candidates() { return cand_.data(); }
  bool sorted() const { return sorted_; }     // candidates()[0, n) in probability order
  double weight_sum() const { return weight_sum_; }

 private:
  std::vector<TokenCandidate> cand_;
  double weight_sum_ = 0;
  bool sorted_ = false;
};

// A row with the sample op's parameters (temperature, top_k, top_p, min_p, u:
// 5 floats), on this thread's TokenSampler; -1 when no logit is finite.
int32_t sample_row(const float* logits, int64_t n_vocab, const float* params);

}  // namespace weir
