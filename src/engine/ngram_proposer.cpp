#include "engine/ngram_proposer.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace weir {

NgramProposer::NgramProposer(NgramOptions o) : o_(o) {
  if (o_.min_n < 1 || o_.max_n < o_.min_n)
    throw Error("n-gram proposer: min_n (" + std::to_string(o_.min_n) + ") must be at least 1 and at most max_n (" +
                std::to_string(o_.max_n) + ")");
}

std::vector<int32_t> NgramProposer::propose(std::span<const int32_t> tokens, int max_tokens) {
  const int64_t L = int64_t(tokens.size());
  if (max_tokens <= 0) return {};
  // Longest suffix first; for one n, the latest earlier start i (< L - n)
  // where tokens[i, i + n) equals the suffix. A plain scan: O(L n) a call.
  for (int n = std::min<int64_t>(o_.max_n, L - 1); n >= o_.min_n; --n) {
    const auto suffix = tokens.subspan(size_t(L - n));
    for (int64_t i = L - n - 1; i >= 0; --i) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + i)) continue;
      const int64_t from = i + n, to = std::min<int64_t>(L, from + max_tokens);
      return std::vector<int32_t>(tokens.begin() + from, tokens.begin() + to);
    }
  }
  return {};
}

}  // namespace weir
