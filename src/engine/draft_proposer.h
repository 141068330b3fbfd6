// Speculative decoding's guesses (issue 48): a proposer looks at one
// sequence's tokens so far and guesses up to max_tokens that may follow; the
// target model then checks them all in one batched step and keeps the
// longest prefix it agrees with. Proposers differ only in where the guesses
// come from (the text itself: NgramProposer; a small draft model; heads on
// the target, later), so the engine sees this interface alone.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace weir {

class DraftProposer {
 public:
  virtual ~DraftProposer() = default;
  // Up to max_tokens guesses of the tokens after `tokens` (the prompt and
  // what was generated, in order); none when the proposer has no guess.
  virtual std::vector<int32_t> propose(std::span<const int32_t> tokens, int max_tokens) = 0;
  // Whether guesses cost next to nothing beside a target step (no model
  // runs): the generator then asks for them even when it will not check
  // them, to score them against the tokens that come.
  virtual bool cheap() const { return true; }
};

}  // namespace weir
