// Sampling a request's next token on the host, for what the backend's
// sample op does not do (its draw is the same: temperature, top-k, top-p,
// min-p and the request's uniform draw u, through the CPU's sample row):
//   * presence and frequency penalties, as OpenAI defines them: each token
//     generated so far (count c > 0 times) has its logit lowered by
//     presence + frequency * c; the prompt's tokens are not counted;
//   * log-probabilities: of the penalized logits at temperature 1 (the
//     model's distribution, before temperature and the filters), for the
//     chosen token and the top_n most likely (ties: lower id first).
#pragma once
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace weir {

struct HostSampling {
  float temperature = 1.0f, top_p = 1.0f, min_p = 0.0f;
  int top_k = 0;
  float u = 0.5f;  // the uniform draw in [0, 1)
  float presence_penalty = 0.0f, frequency_penalty = 0.0f;
  int top_n = -1;  // alternatives' log-probabilities wanted (-1: no log-probabilities at all)
};

struct Alternative {
  int32_t id = -1;
  float logprob = 0.0f;
};
struct HostSample {
  int32_t id = -1;  // -1: no finite logit
  float logprob = 0.0f;
  std::vector<Alternative> top;  // most likely first
};

// logits: one row of n_vocab (changed in place: the penalties go in);
// counts: how often each token was generated so far.
HostSample sample_on_host(std::span<float> logits, const HostSampling& s,
                          const std::unordered_map<int32_t, int>& counts);

}  // namespace weir
