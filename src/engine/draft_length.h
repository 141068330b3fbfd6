// How many guesses to ask a proposer for (issue 48's adaptive draft
// length). The rule, as docs/speculative.md states it:
//
// With a chance a that a guess is kept once those before it were, a step
// of k guesses yields E(k) = (1 - a^(k+1)) / (1 - a) tokens (the kept
// guesses and the target's own token) and costs t(k) + k d + o: t(k) the
// measured time of a target step over k + 1 tokens of the sequence, d the
// measured time the proposer takes a guess (0 for n-gram lookup). The rule
// picks the k in [max(1, draft_min), draft_max] that makes the most tokens
// a second, E(k) / (t(k) + k d + o), and speculates only when that beats plain
// decoding, 1 / t(0), by 3% (draft_min > 0 forces at least draft_min
// guesses). o: what leaving plain decoding's pipeline for a run of guessing
// steps cost beyond the steps, measured (0 on the host).
//
// a is the decayed share of kept guesses over the guesses checked (a
// refused guess ends a step's trials); t(k) the decayed mean of the steps
// of k guesses timed so far; a k not timed yet costs what the nearest
// timed k below it did plus, a token, the slope between the two timed
// lengths below it (or an optimistic 2% of t(0) where that is smaller),
// so that the rule tries longer drafts where the curve is flat and learns
// what they cost, but does not walk up a steep one. Guesses a free
// proposer made while the rule said 0 are scored against the tokens that
// came (observe_unchecked), so that acceptance is known before paying for
// it. Until t(0) is timed the rule asks for draft_min guesses.
#pragma once
#include <cstdint>
#include <vector>

namespace weir {

struct DraftLengthOptions {
  int draft_min = 0;   // fewest guesses a step asks for (0: the rule may decode plainly)
  int draft_max = 16;  // most guesses a step asks for (1 .. kMaxDraft)
  double prior_acceptance = 0.5;  // a before anything was observed (worth 4 guesses)
  double decay = 0.95;            // weight of the past at each observation (acceptance and times)
};

class DraftLength {
 public:
  static constexpr int kMaxDraft = 64;
  // Throws weir::Error unless 0 <= draft_min <= draft_max <= kMaxDraft and
  // draft_max >= 1.
  explicit DraftLength(DraftLengthOptions o = {});

  // The number of guesses for the next step (0: decode plainly).
  int next() const;
  // A checked step: `proposed` guesses, `accepted` of them kept.
  void observe(int proposed, int accepted);
  // Guesses not checked (the rule said 0): `matched` of the first ones
  // turned out to be the tokens that came.
  void observe_unchecked(int proposed, int matched) { observe(proposed, matched); }
  // A target step of k guesses (0: plain decoding, per token) took `seconds`.
  void observe_step(int k, double seconds);
  // The proposer took `seconds` for `tokens` guesses.
  void observe_draft(int tokens, double seconds);
  // A run of guessing steps cost `seconds` beyond its steps (leaving and
  // re-entering plain decoding's pipeline); the rule adds it to each
  // step's cost (a long run pays it once: the rule errs towards plain
  // decoding).
  void observe_overhead(double seconds);

  double acceptance() const;
  // t(k) as the rule sees it now (seconds; 0 when t(0) is not known yet).
  double step_cost(int k) const;
  // Expected tokens a second of k guesses over those of plain decoding.
  double speedup(int k) const;
  // E(k) for acceptance a.
  static double expected_tokens(double a, int k);
  const DraftLengthOptions& options() const { return o_; }

 private:
  DraftLengthOptions o_;
  double kept_ = 0, checked_ = 0;  // decayed counts
  std::vector<double> time_;       // decayed mean seconds of a step of k guesses (0: not timed)
  double draft_seconds_ = 0, draft_tokens_ = 0;
  double overhead_ = 0;  // decayed mean (0: none seen)
  bool overhead_seen_ = false;
};

}  // namespace weir
