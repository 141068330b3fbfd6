// A draft model's guesses for speculative decoding (weir run -md FILE): a
// smaller model of the same vocabulary runs ahead of the target, greedily,
// on a session of its own (the same device or another). Its cache follows
// the sequence: each call keeps what it shares with the tokens so far, runs
// the rest, and then one token a step (pipelined, Session::queue_sample_next)
// for the guesses.
//
// The guesses are the draft's argmax choices, so the target checks them as
// guesses without a distribution (engine/generator.h): exact, and the same
// tokens as plain decoding for a seed.
#pragma once
#include "engine/draft_proposer.h"
#include "engine/session.h"
#include "model/model.h"

namespace weir {

// Throws weir::Error when `draft` cannot guess for `target`: another
// tokenizer, vocabularies that differ (in size by more than 128, in any
// token's text among the ids both have, in BOS/EOS), or a draft with more
// weight bytes than the target (it could not pay for itself). The message
// names both files and what differs.
void check_draft_model(const Model& target, const Model& draft);

class DraftModelProposer final : public DraftProposer {
 public:
  // draft: a session of the draft model (its sequence 0 is the proposer's);
  // target_vocab: the target's n_vocab (guesses past it end the guesses).
  DraftModelProposer(Session& draft, int64_t target_vocab);
  std::vector<int32_t> propose(std::span<const int32_t> tokens, int max_tokens) override;
  bool cheap() const override { return false; }

 private:
  Session& s_;
  int64_t target_vocab_;
  std::vector<int32_t> held_;  // the tokens in the draft's cache, in order
};

}  // namespace weir
