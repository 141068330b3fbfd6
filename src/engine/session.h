// A Session runs a model over token sequences that share one KV cache: it
// feeds batches through cached forward graphs and keeps the logits the
// caller asked for, or samples the next token on the backend. eval and
// eval_sample extend sequence 0; decode_sample steps several sequences at
// once (batched decode: each step reads the weights once for all of them).
//
// Every input goes to the backend through its queue's copies from host
// staging memory the backend chose (pinned for a GPU), and results come
// back the same way, so one Session serves the CPU and a GPU alike. Each
// forward step waits on the host once: after the logits (or the sampled
// token id) are copied back.
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "engine/draft_verify.h"
#include "engine/rank_threads.h"
#include "engine/rng.h"
#include "model/model.h"

namespace weir {

struct SessionParams {
  int64_t n_ctx = 4096;    // KV cache cells
  int64_t n_batch = 512;   // tokens per forward step (prompt processing)
  DType kv_type = DType::F32;
  // Sequences decoded side by side (0 .. n_seq - 1): the cache gives each a
  // region of n_ctx / n_seq cells, so attention reads only its own keys.
  int n_seq = 1;
  // Forward graphs kept, one a step shape (tokens, keys, out rows) by least
  // recent use: a server's steps come in many shapes, and building one costs
  // its planning and (on a GPU) its memory and graph recording.
  int max_graphs = 8;
  // When set and true, the next forward step throws Cancelled instead of
  // running (a long prompt stops between its batches; the CPU backend also
  // stops between graph segments, CpuOptions::stop). A step that throws
  // leaves the session as it was before it.
  const std::atomic<bool>* stop = nullptr;
  // Tensor parallelism: this session is rank tp.rank of tp.size, with its
  // share of the weights and heads (model/shard.h) and a KV cache of its kv
  // heads; collectives go through tp.comm.
  TensorParallel tp;
  // The group's other ranks, when they live in this process (threads): for
  // rank r = 1 .. size - 1, the backend it runs on and its end of the
  // group's collectives. This session (rank 0) makes a session for each
  // and runs every call on all of them at once; results are rank 0's (the
  // ranks compute the same logits and sample the same tokens; a divergence
  // is an error).
  struct Peer {
    Backend* backend = nullptr;
    Collective* comm = nullptr;
  };
  std::vector<Peer> peers;
  // Watching the forward steps (weir imatrix): on_graph gets each forward
  // graph the model builds, before it is planned, and may mark more of its
  // tensors as outputs (they then keep their memory through the run);
  // after_step gets the graph of each step eval() ran, once the step is
  // done. The marked tensors are read in place, so only backends whose
  // memory the host reads (the CPU) serve this.
  std::function<void(Graph&)> on_graph;
  std::function<void(const Graph&)> after_step;
};

// Sampling on the backend (the sample op, core/graph.h): no repetition
// penalty; the random draw comes from the session's generator, seeded here.
struct BackendSampling {
  float temperature = 0.8f;  // <= 0: greedy
  int top_k = 40;            // <= 0: off
  float top_p = 0.95f;       // 1: off
  float min_p = 0.05f;       // 0: off
  uint64_t seed = 1;
};

class Session {
 public:
  Session(const Model& model, Backend& backend, SessionParams p = {});
  ~Session();

  // Appends tokens to the sequence and runs them. Logits are kept for the
  // token indices in `want` (default: the last token only), in that order.
  void eval(std::span<const int32_t> tokens, std::span<const int32_t> want = {});
  // Appends tokens, runs them and samples the token after the last one on
  // the backend; only its id comes back (one host wait per forward step).
  // Logits are not kept.
  int32_t eval_sample(std::span<const int32_t> tokens, const BackendSampling& s);
  // Appends tokens to sequence seq (> 0; sequence 0 is eval's) and runs
  // them, keeping no logits: a prompt before decode_sample.
  void fill(int32_t seq, std::span<const int32_t> tokens);
  // One step of batched decode: tokens[i] is appended to sequence seqs[i]
  // (all distinct) and the token after it sampled on the backend; returns
  // the sampled ids in the same order, after one host wait. allow: empty,
  // or a bitmask of the tokens each row may take (allow_words(n_vocab)
  // words a row, engine/grammar/grammar.h: constrained decoding).
  std::vector<int32_t> decode_sample(std::span<const int32_t> tokens, std::span<const int32_t> seqs,
                                     const BackendSampling& s, std::span<const uint32_t> allow = {});
  // One forward step over tokens of several sequences at once (continuous
  // batching: prompt chunks and decode tokens side by side): tokens[i] is
  // appended to sequence seqs[i] (in order within a sequence; at most the
  // batch size in all). For each out row r (an index into tokens,
  // ascending; several may be one sequence's), the token after tokens[r] is sampled on the
  // backend with params[5k .. 5k + 4] = {temperature, top_k, top_p, min_p,
  // u} for the k-th out row, u a uniform draw in [0, 1) that the caller
  // makes (each request its own random stream). Returns the sampled ids in
  // out-row order, after one host wait. allow: as decode_sample's, a row
  // of words for each out row.
  std::vector<int32_t> step_sample(std::span<const int32_t> tokens, std::span<const int32_t> seqs,
                                   std::span<const int32_t> out_rows, std::span<const float> params,
                                   std::span<const uint32_t> allow = {});
  // The same step, sampling nothing: the logits of the out rows are kept
  // (logits(k) for the k-th), after one host wait. For sampling on the host
  // (penalties, log-probabilities).
  void step_logits(std::span<const int32_t> tokens, std::span<const int32_t> seqs, std::span<const int32_t> out_rows);
  // The same step with the model's hidden states in place of logits: the
  // out rows' last-layer outputs after the output norm, before the LM head
  // (ForwardOutput::Hidden), hidden(k) for the k-th ([n_embd] floats),
  // after one host wait. Out rows here may be every token of a sequence
  // (embeddings pool them).
  void step_hidden(std::span<const int32_t> tokens, std::span<const int32_t> seqs, std::span<const int32_t> out_rows);
  // Frees sequence seq's cells at once (a finished or cancelled request).
  void remove_seq(int32_t seq);
  // Keeps the first n tokens of sequence seq and lets go of the cells of
  // the rest (speculative decoding's refused guesses): its next token goes
  // at position n. n past the sequence's length is an error.
  void truncate(int32_t seq, int64_t n);
  // Speculative decoding's check of sequence 0 (issue 48): appends `last`
  // (the token sampled after the sequence, not yet in the cache) and the
  // guesses, and samples the token after each of them on the backend in one
  // step, row i with the generator's next draw as eval_sample would take it.
  // The guesses stay while they are the sampled tokens (verify_greedy: for
  // guesses made without a distribution this is exact rejection sampling);
  // the cells of the refused ones are let go and the draws of the rows not
  // used are taken back, after one host wait. So the tokens are, for a seed,
  // those that decoding one token a step gives (up to the batched step's
  // rounding).
  DraftVerdict eval_guesses(int32_t last, std::span<const int32_t> guesses, const BackendSampling& s);
  // Sequence `to` (holding nothing) begins with the first n tokens of
  // sequence `from`: it shares their cache cells instead of computing them
  // again (the server's prefix cache) and goes on from position n.
  void share_prefix(int32_t from, int32_t to, int64_t n);
  // Reserves a run of n cache cells for sequence seq's next tokens, so that
  // its cells lie together (KVCache::reserve); unreserve gives back what it
  // did not use.
  // Returns the run's length (at most n; less when no run of n is free).
  int64_t reserve(int32_t seq, int64_t n);
  void unreserve(int32_t seq);
  // Pipelined generation of sequence 0, after eval_sample(): queue_sample_next()
  // queues a step whose input token is the one the step before it sampled
  // (copied on the device: the host need not have seen it) and returns
  // without waiting; take_sampled() returns the id the oldest queued step
  // sampled, after one host wait for that step alone. With the next step
  // queued before the host waits, the device goes from one token to the next
  // with no gap for the host's wake-up, input copies and graph launch. At
  // most kMaxQueued steps are queued. cancel_queued() waits for the steps not
  // taken and takes their tokens (and their random draws) back, so that the
  // session goes on as if they had never been queued. Other calls throw
  // while steps are queued.
  static constexpr size_t kMaxQueued = 2;
  void queue_sample_next(const BackendSampling& s);
  int32_t take_sampled();
  void cancel_queued();
  size_t n_queued() const { return queued_.size(); }
  // Builds and plans the graph of an n_tokens step at the current position
  // without running it: the last part of getting ready to compute a token,
  // which load-time measurements include.
  void prepare(int64_t n_tokens);
  const float* logits(size_t i = 0) const { return logits_host() + i * size_t(n_vocab_); }
  size_t n_logits() const { return n_logits_; }
  const float* hidden(size_t k = 0) const {
    return hidden_ ? static_cast<const float*>(hidden_->data()) + k * size_t(n_embd()) : nullptr;
  }
  size_t n_hidden() const { return n_hidden_; }
  int64_t n_embd() const { return model_.hparams().n_embd; }
  int64_t n_vocab() const { return n_vocab_; }

  int64_t n_past() const { return seq_len(0); }  // tokens of sequence 0
  int64_t seq_len(int32_t seq) const {
    return seq >= 0 && size_t(seq) < seq_len_.size() ? seq_len_[size_t(seq)] : 0;
  }
  int64_t n_ctx() const { return p_.n_ctx; }
  int64_t n_batch() const { return p_.n_batch; }  // tokens a step takes at most
  void reset();

  const Model& model() const { return model_; }
  Backend& backend() { return backend_; }
  const KVCache& kv_cache() const { return kv_; }
  // Forward graphs built so far (a step of a new shape builds one; a few
  // are cached).
  uint64_t graphs_built() const { return graphs_built_; }
  double graph_build_seconds() const { return graph_build_seconds_; }
  // Host time of the steps so far: claiming cells, the inputs, graphs built,
  // queuing the run (not the wait for it).
  double host_seconds() const { return host_seconds_; }
  // Largest activation arena among the graphs built so far.
  size_t activation_bytes() const;

 private:
  struct Step;
  // allowed: a sampling graph whose rows are masked first (allow_tokens).
  Step& step_for(int64_t n_tokens, int64_t n_kv, int64_t n_out, bool sample, bool separate, bool hidden = false,
                 bool allowed = false);
  void fill_masks(Step& st, const std::vector<int32_t>& pos, const std::vector<int32_t>& seq);
  void drop_steps();  // releases the graphs' plans, then the graphs
  // Claims cache cells for tokens[i] at the end of sequence seq[i], fills
  // and copies the step's inputs and runs it; the sequences grow.
  // token_from: backend memory the (one) token is copied from on the
  // device, after tokens[0] (a placeholder) is copied in. hidden: a graph
  // that ends in the hidden states (ForwardOutput::Hidden). allow: the
  // sampled rows' bitmasks (null: none).
  Step& run_batch(std::span<const int32_t> tokens, const std::vector<int32_t>& seq,
                  const std::vector<int32_t>& out_rows, bool sample, const float* sample_params,
                  const void* token_from = nullptr, bool hidden = false, const uint32_t* allow = nullptr);
  // run_batch of a step that samples out_rows (5 values each in params,
  // allow_words(n_vocab) in allow unless null), then the ids back after one
  // host wait.
  std::vector<int32_t> sample_rows(std::span<const int32_t> tokens, const std::vector<int32_t>& seqs,
                                   const std::vector<int32_t>& out_rows, const float* params,
                                   const uint32_t* allow = nullptr);
  // Checks an allow argument's size and pads it to padded_rows rows (the
  // last row again, in allow_padded_); null when allow is empty.
  const uint32_t* padded_allow(std::span<const uint32_t> allow, size_t rows, size_t padded_rows);
  std::vector<uint32_t> allow_padded_;
  void check_not_queued() const;
  // step_sample's and step_logits' argument checks.
  void check_step(std::span<const int32_t> tokens, std::span<const int32_t> seqs, std::span<const int32_t> out_rows) const;
  // With peers: runs f on every rank's session at once and returns true
  // (the caller's call is done); false on a peer, or inside such a run.
  bool on_all_ranks(const std::function<void(Session&)>& f);
  void seed_rng(const BackendSampling& s);
  void check_tokens(std::span<const int32_t> tokens) const;
  const float* logits_host() const { return static_cast<const float*>(logits_->data()); }

  const Model& model_;
  Backend& backend_;
  SessionParams p_;
  KVCache kv_;
  int64_t n_vocab_;
  std::vector<int64_t> seq_len_;  // tokens of each sequence in the cache
  std::unique_ptr<Buffer> logits_;   // host, n_logits_ rows (alloc_host)
  size_t n_logits_ = 0;
  std::unique_ptr<Buffer> hidden_;   // host, n_hidden_ rows of n_embd (step_hidden)
  size_t n_hidden_ = 0;
  std::unique_ptr<Buffer> sampled_;  // host, the sampled token id
  // Pipelined steps: the last sampled id (backend memory, the next queued
  // step's input; null: none to continue from), and the queued steps: an
  // event after each one's id is copied into its slot of queued_ids_.
  const void* last_sampled_ = nullptr;
  struct Queued {
    std::unique_ptr<Event> done;
    size_t slot;
    Rng rng_before;  // the generator before the step's draw (a cancel puts it back)
  };
  std::deque<Queued> queued_;
  std::unique_ptr<Buffer> queued_ids_;  // host, kMaxQueued ids
  size_t next_slot_ = 0;
  Rng rng_;                          // the backend sampler's draws
  uint64_t rng_seed_ = 0;
  bool rng_seeded_ = false;
  // Graphs by (tokens, keys, outputs, sample, one token per sequence, hidden states).
  std::map<std::tuple<int64_t, int64_t, int64_t, bool, bool, bool, bool>, std::unique_ptr<Step>> steps_;
  uint64_t use_clock_ = 0;  // for evicting the least recently used step
  uint64_t graphs_built_ = 0;
  double graph_build_seconds_ = 0, host_seconds_ = 0;
  // Tensor parallelism in this process: the other ranks' sessions and the
  // threads that run them (rank 0 only).
  std::vector<std::unique_ptr<Session>> peers_;
  std::unique_ptr<RankThreads> rank_threads_;
  bool leading_ = false;  // inside on_all_ranks
};

}  // namespace weir
