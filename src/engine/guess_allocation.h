// How many speculative guesses each request of a continuous-batching step
// checks (issue 48): the batcher's version of engine/draft_length.h's rule,
// for many sequences sharing one step.
//
// A request's next guess is kept with chance a^(k+1) when it already has k
// (a: its decayed acceptance, each guess kept with chance a once those
// before it were). A step of T tokens without guesses generates `yield`
// tokens (its decoding requests' next tokens) in t(T) (engine/step_times.h);
// with n guesses more it generates yield + the sum of their chances in
// t(T + n). The rule orders every possible guess by its chance (each
// request's in order: a^1, a^2, ...) and takes the prefix of that order
// that makes the most tokens a second, none when no prefix beats the step
// without guesses. So a guess must pay for the time it adds: where the
// step's cost grows with its tokens (many busy sequences, a compute-bound
// step) speculation backs off by itself; where tokens are nearly free (a
// few sequences on a GPU) each request takes as many as its chances
// warrant, up to what its proposer guessed and the step's room.
//
// The step's size with guesses is one of few (step_size_on_ladder): each
// size is a forward graph the session builds and keeps, and a server whose
// steps took every size would spend its time building graphs. So the rule
// weighs only the prefixes that end the step on the ladder.
//
// A proposer that costs time (a draft model, engine/draft_batch.h) adds
// its own: it runs one step for all the step's requests for each guess the
// deepest of them takes, so a step whose most guessed request has d
// guesses costs t(T + n) + d * draft_step_seconds.
//
// draft_min > 0 gives each request min(draft_min, its guesses) first,
// whatever they cost (room permitting). While nothing is timed the rule
// gives only those.
#pragma once
#include <cstddef>
#include <span>
#include <vector>

#include "engine/step_times.h"

namespace weir {

struct GuessCandidate {
  double acceptance = 0;  // a, in [0, 1)
  int available = 0;      // guesses its proposer made (already capped by its max_tokens and context)
};

struct GuessStep {
  size_t tokens = 0;  // the step's tokens without guesses (decode tokens and prompt chunks)
  double yield = 0;   // tokens it generates without guesses
  size_t room = 0;    // guesses it may take in all (its token budget left)
  int draft_min = 0;
  double draft_step_seconds = 0;  // the proposer's time a guess deep (0: free, as n-gram lookup)
};

// Whether a step of T tokens is one of the sizes guesses may make: any up
// to 8, multiples of 8 up to 64, multiples of 32 above (29 sizes to 512).
bool step_size_on_ladder(size_t T);

// The guesses for each candidate, in order (each at most its available).
std::vector<int> allocate_guesses(std::span<const GuessCandidate> candidates, const GuessStep& step,
                                  const StepTimes& times);

}  // namespace weir
