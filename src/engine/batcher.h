// The serving loop: requests from any thread, one forward step at a time
// for all of them (continuous batching). Each step takes the decode token
// of every running request and then chunks of waiting prompts, up to a
// token budget, in one Session::step_sample; a new request starts at the
// next step without pausing the others, and a finished or cancelled one
// gives its cache cells back at once. The cache is one pool: a sequence
// takes cells as it grows, so one long conversation and many short ones
// fit side by side.
//
// Prefix cache: a finished request's cells stay (up to
// BatcherOptions::kept_prefixes of them, least recently used let go first,
// and under memory pressure before anything else); a new request whose
// prompt begins with tokens some sequence holds, running or kept, shares
// those cells and computes only the rest. A request whose prompt shares
// more with a prompt still being computed waits a step for it. When the
// cache runs out anyway, the newest request is set back: its cells are
// freed and it is queued again to recompute what it had (its output goes
// on where it stopped).
//
// Speculative decoding (BatcherOptions::spec, mode Ngram or Draft; issue
// 48): a decoding request may put guesses of its next tokens after its decode
// token, [last, g1 .. gk], each with an out row, beside the other requests'
// decode tokens and prompt chunks in the same step. Every row is sampled as
// plain decoding samples it, row i with the draw plain decoding would take
// for that position of the request's random stream; the guesses stay while
// they equal the sampled tokens (verify_greedy), the first sample that
// differs is the next token, the cells of the refused guesses are let go
// (Session::truncate) and the unused draws taken back. For guesses made
// without a distribution (n-gram lookup) this is exact rejection sampling,
// and it gives the very tokens decoding without guesses gives for the same
// seed, greedy or sampled (up to the batched step's rounding). The accepted
// tokens go out one by one through the path every token takes (stop
// strings, end of generation, max_tokens), so a request may end among
// them. How many guesses each request checks: engine/guess_allocation.h,
// with this loop's measured step times (engine/step_times.h) and, with a
// draft model (engine/draft_batch.h: one draft step a guess deep for all
// requests together), the draft's measured time a step. Requests
// under a grammar decode plainly (no guesses); those sampled on the host
// (penalties, log-probabilities, logit_bias) speculate, each row sampled
// with the counts of the guesses before it.
//
// The policy of what runs next is plan_step() (no model needed, tested on
// its own); the engine runs the plans.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/draft_batch.h"
#include "engine/draft_length.h"
#include "engine/grammar/grammar.h"
#include "engine/ngram_proposer.h"
#include "engine/rng.h"
#include "engine/session.h"
#include "engine/host_sampling.h"
#include "engine/spec_options.h"
#include "engine/guess_allocation.h"
#include "engine/step_times.h"
#include "engine/stop_strings.h"
#include "text/tokenizer.h"
#include "text/utf8_streamer.h"

namespace weir {

struct JobCounts {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens taken from the prefix cache
};

struct Job {
  std::vector<int32_t> prompt;  // token ids (the chat template already applied)
  int max_tokens = -1;          // -1: until the context is full
  float temperature = 1.0f, top_p = 1.0f, min_p = 0.0f;
  int top_k = 0;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  // These two sample on the host (server/host_sampling.h): the step's
  // logits come back instead of only its tokens (guesses too: each row
  // with the counts of the guesses before it, as plain decoding has them).
  float presence_penalty = 0.0f, frequency_penalty = 0.0f;
  int top_logprobs = -1;  // -1: no log-probabilities; n >= 0: the chosen token's and n alternatives
  // Added to the token's logit before sampling (OpenAI's logit_bias; -100
  // bans it, +100 all but forces it); samples on the host.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // The output must match this grammar (null: free text): each step's
  // tokens are masked to those it allows (engine/grammar/grammar.h). Such a
  // request decodes plainly under speculative decoding (no guesses).
  std::shared_ptr<const CompiledGrammar> grammar;
  // Called on the engine's thread: text as it becomes final (stop strings
  // held back, whole UTF-8 characters), then once at the end.
  std::function<void(const std::string& text)> on_text;
  std::function<void(const std::string& finish_reason, const JobCounts& counts)> on_done;
  std::function<void(const std::string& error)> on_error;
  // With top_logprobs >= 0: each generated token, before its text.
  std::function<void(const HostSample& token)> on_token;
  bool on_host() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || top_logprobs >= 0 || !logit_bias.empty();
  }
};

// Thrown by submit when the queue is full (HTTP 503).
struct QueueFull : Error {
  using Error::Error;
};

// One step's tokens: which request each token and out row belongs to.
struct StepPlan {
  std::vector<int32_t> tokens, seqs, out_rows;
  std::vector<uint8_t> decoded;  // whether each active request put its decode token in
  std::vector<size_t> out_owner;  // the request (index into the active list) of each out row
  std::vector<size_t> prompt_taken;  // prompt tokens each active request put in (by index)
  std::vector<size_t> guessed;       // guesses each active request put in after its decode token
};
struct ActiveView {
  size_t prompt_len = 0, prompt_done = 0;
  bool decoding = false;  // has a sampled token to put in
  int32_t last = -1;      // that token
  int seq = -1;
  const int32_t* prompt = nullptr;  // its prompt's ids (null: chunks left as -1)
  // Guesses of the tokens after `last` (speculative decoding), to be checked
  // in this step: they go right after its decode token, each an out row.
  const int32_t* guesses = nullptr;
  size_t n_guesses = 0;
};
// Decode tokens first (every decoding request, in order, each followed by
// its guesses while the budget leaves room after every decode token), then
// prompt chunks in arrival order, until `budget` tokens. A request's rows
// are consecutive: [last, g1 .. gk] give k + 1 out rows.
StepPlan plan_step(const std::vector<ActiveView>& active, size_t budget);

struct BatcherOptions {
  int max_sequences = 8;        // requests decoded side by side
  size_t step_tokens = 512;     // tokens a forward step takes
  size_t queue_limit = 64;      // waiting requests beyond the running ones
  int kept_prefixes = 32;       // finished requests whose cells stay for reuse
  bool reuse_prefixes = true;   // false: every prompt computed whole (no prefix cache at all)
  int grammar_threads = 0;      // threads that compute a step's grammar masks (0: the host's, up to 16)
  // Speculative decoding (mode Ngram: prompt lookup, each request's guesses
  // from its own prompt and output; mode Draft: a draft model's, on `draft`).
  SpecOptions spec;
  // Mode Draft: a session of the draft model (the front end loads it:
  // engine/spec_setup.h's make_batch_draft), its cells one pool; the
  // batcher uses its own sequence ids there and frees each with its
  // request. Not owned; it must outlive the Batcher.
  Session* draft = nullptr;
  // Called after each step (engine thread): a line of what it held and how
  // long it took, for weir serve --log-steps.
  std::function<void(const std::string& csv_line)> step_log;
};

// The length of the longest common prefix of a and b.
size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b);

class Batcher {
 public:
  // The session must have been made with n_batch >= step_tokens; the engine
  // owns the loop thread from start() to stop().
  Batcher(Session& s, const Tokenizer& tok, BatcherOptions o);
  ~Batcher();
  void start();
  // Finishes the running requests and ends the loop (queued ones get an
  // error).
  void stop();

  // Queues a job; returns its id. Throws QueueFull, or Error when the
  // prompt does not fit the context (naming both lengths).
  uint64_t submit(Job job);
  // Queues jobs together (the choices of one request): all of them or none
  // (QueueFull when the queue lacks room for all); their ids in order.
  std::vector<uint64_t> submit_all(std::vector<Job> jobs);
  size_t queue_limit() const { return o_.queue_limit; }  // jobs that may wait at once
  // Stops a job (a client that went away): on_done("cancelled") comes
  // (here if it was still waiting, else from the engine's thread before its
  // next step) and its cells are freed. Unknown ids are ignored.
  void cancel(uint64_t id);

  // Work on the session between two steps, on the engine's thread (the
  // embeddings of /v1/embeddings): it may run forward steps of its own on
  // sequence ids from first_seq up (ids no request of this loop takes) and
  // must free them before it returns. Kept prefixes are let go first until
  // `cells` cache cells are free. on_error gets what run threw, or QueueFull
  // when the loop stops before running it. submit_work throws QueueFull
  // when the loop is stopping or as many works wait as requests may.
  struct SessionWork {
    size_t cells = 0;
    std::function<void(Session& s, int32_t first_seq)> run;
    std::function<void(std::exception_ptr error)> on_error;
  };
  void submit_work(SessionWork w);
  size_t step_tokens() const { return o_.step_tokens; }  // a forward step's tokens at most
  // Compiles the grammars of constrained outputs against this model's
  // vocabulary (Job::grammar), from any thread.
  GrammarCompiler& grammars() { return grammars_; }

  struct Stats {
    uint64_t requests = 0, prompt_tokens = 0, generated_tokens = 0, steps = 0;
    uint64_t reused_tokens = 0;  // prompt tokens taken from the prefix cache, not computed
    uint64_t set_back = 0;       // requests set back for want of cache cells
    size_t queued = 0, running = 0, kept_prefixes = 0;
    int64_t kv_cells_used = 0;
    double step_seconds = 0;  // total
    uint64_t graphs_built = 0;  // forward graphs the session built (a new step shape each)
    double graph_build_seconds = 0, step_host_seconds = 0;
    // Speculative decoding: guesses checked, and of them kept (generated_tokens counts the kept ones too).
    uint64_t guesses_drafted = 0, guesses_accepted = 0;
    // With a draft model: its forward steps and their seconds (beside step_seconds, not in it).
    uint64_t draft_steps = 0;
    double draft_seconds = 0;
  };
  Stats stats() const;

  // A running request as the last step began (weir serve's /slots).
  struct Running {
    uint64_t id = 0;
    int seq = -1;
    size_t prompt_tokens = 0, prompt_done = 0;  // prompt_done: in the cache (computed or shared)
    int64_t generated = 0, max_tokens = -1;
    bool constrained = false;  // under a grammar
  };
  std::vector<Running> running() const;

 private:
  struct Active;
  struct Kept {  // a finished request's cells, kept for the prefix cache
    int seq = -1;
    std::vector<int32_t> tokens;
    uint64_t used = 0;
  };
  void loop();
  void admit();  // queued requests into free sequences, under m_
  bool step();   // false when there was nothing to do
  // Shares the longest prefix any sequence holds of a's prompt; false when
  // a prompt still being computed would give a longer one (a waits).
  bool take_prefix(Active& a);
  int take_seq();                  // a free sequence id (letting a kept one go if need be)
  bool let_go_kept();              // the least recently used kept prefix; false: none
  void make_room(size_t cells);    // lets kept prefixes go until `cells` are free, or none left
  void set_back(size_t i);         // active_[i] back to the queue's front, its cells freed
  // The step's forward pass and the tokens of its out rows, sampled on the
  // backend, or on the host when a request asks for what only the host does.
  std::vector<int32_t> run_step(const StepPlan& p, std::vector<HostSample>& host);
  void finish(Active& a, const std::string& reason);
  // A generated token through the path every token takes (counts, on_token,
  // grammar, end of generation, stop strings, max_tokens, the context);
  // held: the tokens its sequence would hold had it been decoded alone.
  // False when the token ended the request (it is finished and released).
  bool emit(Active& a, int32_t id, const HostSample* host, int64_t held);
  // Speculative decoding: each decoding request's guesses for the next step
  // (Active::guesses), by the rule of engine/guess_allocation.h.
  void propose_guesses();
  // The step before any guess (its tokens, the decode tokens it yields, the
  // room left); *prompt_left: prompt tokens still to compute.
  GuessStep step_without_guesses(size_t* prompt_left) const;
  // Mode Draft: the rule first (every guess the draft could make, at its
  // measured cost), then the draft only for the requests it gives guesses.
  void propose_draft_guesses();
  void release(Active& a, bool keep);  // its sequence back (kept for reuse when keep)
  void update_gauges();                // under m_
  void run_works(std::deque<SessionWork>& works);  // engine thread, not under m_

  static constexpr size_t kWaitGain = 16;  // prompt tokens worth waiting a step for
  // Shorter common prefixes are computed again, not shared: a sequence's
  // keys then lie in one run of cells, not scattered for a few tokens' sake.
  static constexpr size_t kMinShare = 16;
  Session& s_;
  const Tokenizer& tok_;
  BatcherOptions o_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Active>> queue_;
  std::vector<std::unique_ptr<Active>> active_;  // engine thread only
  GrammarCompiler grammars_;
  std::vector<Running> running_;  // under m_ (update_gauges)
  GrammarWorkers grammar_workers_;
  std::vector<uint32_t> allow_;  // a step's grammar masks, a row each out row
  std::vector<uint64_t> cancelled_;
  std::deque<SessionWork> works_;  // submit_work's, waiting for the engine thread
  std::vector<int> free_seqs_;
  std::vector<Kept> kept_;  // engine thread only
  uint64_t use_clock_ = 0;
  uint64_t next_id_ = 1;
  bool stopping_ = false;
  std::thread thread_;
  Stats stats_;
  std::unique_ptr<NgramProposer> proposer_;  // with spec mode Ngram
  std::unique_ptr<DraftBatch> draft_;        // with spec mode Draft
  double draft_step_seconds_ = 0;            // a draft step's decayed mean seconds (0: none timed yet)
  // Every so many plain steps a request the rule gives no draft guesses is
  // given a few, so that its acceptance follows its text (as weir run's
  // rule tries 2 every 32: a draft's guesses cost time, so unlike n-gram
  // lookup's they are not made to be scored unchecked).
  static constexpr int kDraftProbeEvery = 32, kDraftProbeGuesses = 2;
  // t(T) of this loop's steps, less the graphs they built: of decode
  // tokens (and guesses) alone, and of steps with prompt chunks, which
  // cost differently at one size (few sequences, long runs of tokens).
  StepTimes decode_times_, prompt_times_;
};

}  // namespace weir
