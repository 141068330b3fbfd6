#include "engine/draft_verify.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"

namespace weir {
namespace {

// A draw from weights w (not normalized; their sum > 0), in index order.
int32_t draw(std::span<const double> w, double total, Rng& rng) {
  const double u = rng.next_double() * total;
  double c = 0;
  int32_t last = -1;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] <= 0) continue;
    c += w[i];
    last = int32_t(i);
    if (u < c) return last;
  }
  return last;  // rounding at the very end
}

}  // namespace

DraftVerdict verify_greedy(std::span<const int32_t> guesses, std::span<const int32_t> target_tokens) {
  if (target_tokens.size() != guesses.size() + 1)
    throw Error("verify_greedy: " + std::to_string(guesses.size()) + " guesses need " +
                std::to_string(guesses.size() + 1) + " target tokens, not " + std::to_string(target_tokens.size()));
  DraftVerdict v;
  while (size_t(v.accepted) < guesses.size() && guesses[size_t(v.accepted)] == target_tokens[size_t(v.accepted)])
    ++v.accepted;
  v.next = target_tokens[size_t(v.accepted)];
  return v;
}

DraftVerdict verify_sampled(std::span<const int32_t> guesses, std::span<const float> p, std::span<const float> q,
                            int64_t n_vocab, Rng& rng) {
  const size_t k = guesses.size(), V = size_t(n_vocab);
  if (n_vocab <= 0 || p.size() != (k + 1) * V || (!q.empty() && q.size() != k * V))
    throw Error("verify_sampled: " + std::to_string(k) + " guesses need " + std::to_string(k + 1) +
                " target rows and 0 or " + std::to_string(k) + " proposer rows of " + std::to_string(n_vocab));
  std::vector<double> w(V);
  DraftVerdict v;
  for (size_t i = 0; i < k; ++i) {
    const int32_t x = guesses[i];
    if (x < 0 || size_t(x) >= V) throw Error("verify_sampled: guess " + std::to_string(x) + " is not a token");
    const float* pi = p.data() + i * V;
    const double px = pi[x], qx = q.empty() ? 1.0 : double(q[i * V + size_t(x)]);
    // Stays with probability min(1, p/q) (u < p/q, u in [0, 1)).
    if (qx > 0 && rng.next_double() * qx < px) {
      ++v.accepted;
      continue;
    }
    // Refused: the next token from max(0, p - q), normalized.
    double total = 0;
    for (size_t t = 0; t < V; ++t) {
      const double qt = q.empty() ? (t == size_t(x) ? 1.0 : 0.0) : double(q[i * V + t]);
      w[t] = std::max(0.0, double(pi[t]) - qt);
      total += w[t];
    }
    if (total <= 0) {  // p <= q everywhere: p == q, where a refusal cannot happen; p itself
      for (size_t t = 0; t < V; ++t) total += (w[t] = double(pi[t]));
    }
    v.next = draw(w, total, rng);
    return v;
  }
  const float* pk = p.data() + k * V;
  double total = 0;
  for (size_t t = 0; t < V; ++t) total += (w[t] = double(pk[t]));
  v.next = draw(w, total, rng);
  return v;
}

}  // namespace weir
