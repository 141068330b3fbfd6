// The continuous batcher's measured cost of a forward step by its token
// count, t(T): what speculative decoding's guesses are weighed against
// (engine/guess_allocation.h). A guess adds a token to the step; whether
// that token is nearly free (a GPU's memory-bound decode step) or costs
// its full share (a compute-bound one, many sequences) is measured, not
// assumed.
//
// Each T timed keeps a decayed mean of its steps' seconds. A T not timed
// is read between the nearest timed T below and above it (linearly); below
// every timed T, in proportion to the smallest (a cautious guess: guesses
// do not pay until a step of about their size is timed); above every timed
// T, optimistically: as the largest plus a quarter of its cost for each
// doubling, so that the rule tries a longer step once and learns what it
// costs.
#pragma once
#include <cstddef>
#include <map>

namespace weir {

class StepTimes {
 public:
  // decay: weight of the past at each new time of the same T, in (0, 1].
  explicit StepTimes(double decay = 0.9) : decay_(decay) {}
  // A step of `tokens` tokens took `seconds` (ignored unless both > 0).
  void observe(size_t tokens, double seconds);
  // t(tokens) in seconds as the rule sees it; 0 while nothing is timed.
  double cost(size_t tokens) const;
  bool empty() const { return mean_.empty(); }
  // Growth of an untimed step above every timed one: a quarter of the
  // largest timed cost for each doubling of its tokens.
  static constexpr double kExploreSlope = 0.25;

 private:
  double decay_;
  std::map<size_t, double> mean_;  // by T: decayed mean seconds
};

}  // namespace weir
