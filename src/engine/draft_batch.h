// A draft model's guesses for many sequences at once: the continuous
// batcher's draft (weir serve -md FILE, Python draft_model="path"; issue 48).
// engine/draft_model_proposer.h guesses for one sequence; a server with 64
// requests cannot afford a draft step per request, so here every request
// that wants guesses goes through the same few draft steps:
//
//   1. one step brings each requesting sequence's draft cache up to date
//      (the tokens it lacks, an out row at its last one: its first guess);
//   2. then one step a guess, a token for each sequence still guessing.
//
// So a batcher step costs the draft max(k) steps for all its requests
// together, not one a guess of each request.
//
// The draft's session holds one sequence per batcher sequence id (the same
// ids as the target's: a request's draft sequence is its target sequence's
// id). Nothing is shared between draft sequences (no prefix cache on the
// draft side: a new request's prompt is computed by the draft in its first
// step, which for a model small enough to be a draft is cheap). A
// sequence's cache is kept to what it shares with the tokens asked about;
// the rest is let go (Session::truncate) before it is extended.
//
// Guesses are the draft's argmax choices (greedy), so the target checks
// them as guesses without a distribution: exact, and for a seed the very
// tokens plain decoding gives. A guess the target's vocabulary lacks ends
// that sequence's guesses.
#pragma once
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/session.h"

namespace weir {

class DraftBatch {
 public:
  // draft: a session of the draft model, n_batch tokens a step, its cells
  // one pool (n_seq 1) that every sequence id takes from; target_vocab: the
  // target's n_vocab.
  DraftBatch(Session& draft, int64_t target_vocab);

  struct Request {
    int32_t seq = -1;                 // the batcher's sequence id
    std::span<const int32_t> tokens;  // the text so far: prompt, output, the token to be checked next
    int max_guesses = 0;              // >= 1
  };
  // Each request's greedy guesses of the tokens after its `tokens`, at most
  // max_guesses (fewer when a guess is past the target's vocabulary, or
  // none when its text has a token the draft lacks or the draft's cache has
  // no room for it). Runs 1 + max(max_guesses) - 1 draft steps at most.
  std::vector<std::vector<int32_t>> propose(std::span<const Request> requests);
  // The sequence's draft cells go (its request finished or was set back).
  void release(int32_t seq);

  // The draft steps run so far and their seconds (wall time, the host's
  // waits included).
  int64_t steps() const { return steps_; }
  double seconds() const { return seconds_; }
  // Of them, the steps of at most two tokens a sequence (a guess each, or a
  // caught-up sequence's last tokens): what a guess deep costs, which the
  // batcher weighs guesses against. The others compute a new request's
  // prompt, once (the draft's share of its prefill).
  int64_t guess_steps() const { return guess_steps_; }
  double guess_seconds() const { return guess_seconds_; }
  int64_t sequences_held() const { return int64_t(held_.size()); }

 private:
  // One step of the draft, greedy rows at out_rows; counts and times it.
  std::vector<int32_t> run(const std::vector<int32_t>& tokens, const std::vector<int32_t>& seqs,
                           const std::vector<int32_t>& out_rows, size_t sequences);
  Session& s_;
  int64_t target_vocab_;
  std::unordered_map<int32_t, std::vector<int32_t>> held_;  // by sequence: the tokens in its draft cache, in order
  int64_t steps_ = 0, guess_steps_ = 0;
  double seconds_ = 0, guess_seconds_ = 0;
};

}  // namespace weir
