// Generating sequence 0's tokens after a prompt, the loop of weir run, chat
// and bench: plain decoding (on a GPU with the next step queued before the
// host waits, Session::queue_sample_next) or speculative decoding (issue
// 48), where a proposer's guesses are checked in one batched step of the
// target and the ones it agrees with are kept.
//
// Same tokens: the guesses stay while they are what the target samples at
// their positions, row by row with the draw plain decoding would take there
// (Session::eval_guesses on the backend; on the host the Sampler over each
// row's logits in turn). For guesses made without a distribution (n-gram
// lookup, a draft model's greedy choices) this is exact rejection sampling
// (engine/draft_verify.h), so the output follows the target's distribution;
// and for a seed it is the output of plain decoding, greedy or sampled, up to
// the batched step's rounding.
//
// How many guesses a step checks follows engine/draft_length.h's rule, from
// the acceptance seen so far and the measured time of the steps (each
// length's first step untimed: it may record its graph). When the rule
// says 0 the generator decodes plainly, pipelined on a GPU, and a cheap
// proposer's guesses are still scored against the tokens that come, so it
// takes speculation up again when the text starts to repeat. (Checking
// them now and then anyway, to measure the costs again, cost the H200's
// Gemma 3 270M 7% on free text: leaving the pipeline is dear there.)
//
// Steps of k guesses come in up to draft_max + 1 shapes, each a forward
// graph: a session used with guesses keeps kSpecGraphs of them
// (SessionParams::max_graphs) so that they are built once. Steps are timed
// without the graph building they did.
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "engine/draft_length.h"
#include "engine/draft_proposer.h"
#include "engine/sampler.h"
#include "engine/session.h"

namespace weir {

// Where the tokens are sampled: on the backend (only ids come back) or on
// the host, by a Sampler over the logits (the repetition penalty).
struct GeneratorSampling {
  bool on_backend = true;
  BackendSampling backend;
  Sampler* host = nullptr;  // when !on_backend; the generator feeds it every token of the context
};

struct SpecStats {
  int64_t tokens = 0;        // generated (returned by next())
  int64_t steps = 0;         // target steps after the prompt
  int64_t spec_steps = 0;    // of them, steps that checked guesses
  int64_t drafted = 0;       // guesses checked
  int64_t accepted = 0;      // guesses kept
  double draft_seconds = 0;  // in the proposer
  double acceptance() const { return drafted ? double(accepted) / double(drafted) : 0.0; }
  double tokens_per_step() const { return steps ? double(tokens) / double(steps) : 0.0; }
};

class Generator {
 public:
  static constexpr int kSpecGraphs = 64;
  // proposer: null for plain decoding. The session's sequence 0 may hold
  // tokens already (a conversation's earlier turns; start() says which).
  Generator(Session& s, GeneratorSampling how, DraftProposer* proposer, DraftLengthOptions length = {});
  // Starting from what an earlier generator on this device learnt (its
  // draft_length(): the step costs and acceptance), as chat's turns and
  // bench's repetitions do.
  Generator(Session& s, GeneratorSampling how, DraftProposer* proposer, const DraftLength& learnt);
  ~Generator();

  // Runs the tokens of `context` past the first `cached` (those sequence 0
  // holds already, in order) and returns the token after them. `context` is
  // the whole sequence: the proposer looks back over all of it.
  int32_t start(std::span<const int32_t> context, size_t cached = 0);
  // The next tokens, 1 to max_tokens of them: kept guesses, then the
  // target's own token. The last one returned is not in the cache yet (as
  // after eval_sample). Throws as the session does (Cancelled on a stop).
  std::vector<int32_t> next(int max_tokens);
  // Ends generation: queued steps are taken back and the cache holds the
  // context and every token returned but the last (a conversation goes on
  // from there). Safe to call twice.
  void finish();

  const SpecStats& stats() const { return stats_; }
  const DraftLength& draft_length() const { return length_; }
  // The context and the tokens returned so far.
  const std::vector<int32_t>& tokens() const { return tokens_; }

 private:
  using Clock = std::chrono::steady_clock;
  int32_t plain_step(int32_t last);  // one token after `last` (not pipelined)
  std::vector<int32_t> check(int32_t last, const std::vector<int32_t>& guesses);
  // The guesses for the step after the sequence (at most `most`), or none;
  // with the rule at 0 a cheap proposer's are kept for scoring.
  std::vector<int32_t> guesses(int most);
  // Pipelined: whether the step after the queued one should check guesses
  // (a cheap proposer has some and the rule asks for them, or a costly
  // proposer is due); else a cheap proposer's guesses are kept for scoring.
  bool want_guesses(int most);
  void keep_unchecked(int most);
  void score_unchecked();
  int32_t host_sample(const float* logits);

  Session& s_;
  GeneratorSampling how_;
  DraftProposer* proposer_;
  DraftLength length_;
  std::vector<int32_t> tokens_;
  SpecStats stats_;
  std::vector<int32_t> unchecked_;  // guesses the rule did not check, scored as tokens come
  size_t unchecked_at_ = 0;         // where in tokens_ they begin
  int plain_since_probe_ = 0;       // plain steps since a costly proposer was last tried
  int probe_every_ = 32;            // plain steps between its tries (doubling while they keep nothing, to 1,024)
  bool probing_ = false;            // the step being checked is such a try
  std::set<int> timed_once_;        // step lengths seen once (their first run is not timed)
  std::optional<Clock::time_point> last_return_;  // when start() or next() last returned
  double overhead_ = 0;       // leaving and re-entering the pipeline since the last run of guessing steps
  bool entering_ = true;      // the next step of guesses begins a run of them
  double draft_in_step_ = 0;  // the proposer's time in this next() call (the rule counts it apart)
  bool finished_ = false;
};

}  // namespace weir
