// Prompt lookup (n-gram) guesses for speculative decoding: the sequence's
// last n tokens (n from max_n down to min_n) are looked for earlier in the
// sequence, and the tokens that followed their latest earlier occurrence are
// the guesses. No second model: it pays where the output repeats its input
// (rewriting a paragraph, quoting a text, editing code).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "engine/draft_proposer.h"

namespace weir {

struct NgramOptions {
  int min_n = 2;  // the shortest suffix matched (1 guesses from single tokens: noisy)
  int max_n = 4;  // the longest; a longer match is tried first
};

class NgramProposer final : public DraftProposer {
 public:
  // Throws weir::Error unless 1 <= min_n <= max_n.
  explicit NgramProposer(NgramOptions o = {});
  // For the longest n with a match: the tokens after the latest occurrence
  // of the last n tokens that starts before them, up to max_tokens (they
  // may run into the suffix itself, as a repeated pattern continues).
  std::vector<int32_t> propose(std::span<const int32_t> tokens, int max_tokens) override;

 private:
  NgramOptions o_;
};

}  // namespace weir
