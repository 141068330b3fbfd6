#include "engine/session.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "model/shard.h"

namespace weir {
namespace {

// The token every rank of a tensor-parallel group sampled: the same one,
// or they diverged.
template <typename T>
T same_on_every_rank(const std::vector<T>& ids) {
  for (const T& id : ids)
    if (id != ids[0]) throw Error("tensor parallel: the ranks sampled different tokens (they diverged)");
  return ids[0];
}

// Attention spans are padded so one graph serves many decode steps.
constexpr int64_t kKvPad = 256;

}  // namespace

// A cached forward graph, with its inputs in one block of backend memory,
// each at its own offset, and the host staging memory they are copied from
// in one copy: the same layout, twice over (the runs of a step take the
// halves in turn, so a queued step's copy may still be pending while the
// next one fills the other half). One copy, not one an input: each copy is
// a few µs of the stream between two steps' graphs.
struct Session::Step {
  ForwardGraph fg;
  Tensor* sample_params = nullptr;  // F32 [5, n_out] when the step samples
  Tensor* sampled = nullptr;        // I32 [n_out]
  Tensor* allow = nullptr;          // I32 [allow_words, n_out] when the sampled rows are masked
  std::unique_ptr<Buffer> inputs;   // backend memory
  std::unique_ptr<Buffer> staging;
  size_t half = 0;  // bytes of one half
  size_t turn = 0;  // the half this run fills
  struct Slot {
    Tensor* t;
    size_t offset;
  };
  std::vector<Slot> slots;  // in the order of the inputs below
  uint64_t last_used = 0;
  // The masks in each half: the entries the last run there opened (0; the
  // rest is -inf), so the next run there closes those alone rather than
  // writing the whole [tokens x keys] again (a server's pool has tens of
  // thousands of keys). Not yet filled, or too many to list: written whole.
  struct Opened {
    bool valid = false;
    std::vector<uint32_t> at;
  };
  Opened opened[2];
  void* host(const Tensor* t) const {
    for (const Slot& s : slots)
      if (s.t == t) return static_cast<char*>(staging->data()) + turn * half + s.offset;
    return nullptr;
  }
};

Session::Session(const Model& model, Backend& backend, SessionParams p)
    : model_(model), backend_(backend), p_(p),
      kv_(shard_hparams(model.hparams(), p.tp), p.n_ctx, p.kv_type, backend, p.n_seq),
      n_vocab_(model.hparams().n_vocab) {
  if (p_.n_batch <= 0) throw Error("session: batch size must be positive");
  if (p_.tp.size > 1 && !p_.tp.comm) throw Error("session: tensor parallel without a communicator");
  sampled_ = backend_.alloc_host(sizeof(int32_t));
  queued_ids_ = backend_.alloc_host(kMaxQueued * sizeof(int32_t));
  if (!p_.peers.empty()) {
    if (p_.tp.rank != 0 || int(p_.peers.size()) + 1 != p_.tp.size)
      throw Error("session: peers are the ranks 1 .. size - 1 of rank 0");
    for (size_t i = 0; i < p_.peers.size(); ++i) {
      SessionParams pp = p_;
      pp.peers.clear();
      pp.tp.rank = int(i) + 1;
      pp.tp.comm = p_.peers[i].comm;
      if (!p_.peers[i].backend || !pp.tp.comm) throw Error("session: a peer without a backend or communicator");
      peers_.push_back(std::make_unique<Session>(model, *p_.peers[i].backend, pp));
    }
    Collective* comm = p_.tp.comm;
    rank_threads_ = std::make_unique<RankThreads>(p_.tp.size, [comm](const std::string& why) { comm->abort(why); });
  }
}

bool Session::on_all_ranks(const std::function<void(Session&)>& f) {
  if (peers_.empty() || leading_) return false;
  leading_ = true;
  struct Reset {
    bool& b;
    ~Reset() { b = false; }
  } reset{leading_};
  rank_threads_->run([&](int r) { f(r == 0 ? *this : *peers_[size_t(r - 1)]); });
  return true;
}

Session::~Session() { drop_steps(); }

void Session::drop_steps() {
  for (auto& [key, st] : steps_) backend_.release(*st->fg.graph);
  steps_.clear();
}

void Session::reset() {
  if (on_all_ranks([&](Session& s) { s.reset(); })) return;
  check_not_queued();
  last_sampled_ = nullptr;
  kv_.clear();
  seq_len_.clear();
  n_logits_ = 0;
}

void Session::check_tokens(std::span<const int32_t> tokens) const {
  for (int32_t id : tokens)
    if (id < 0 || id >= n_vocab_) throw Error("session: token id " + std::to_string(id) + " is outside the vocabulary");
}

size_t Session::activation_bytes() const {
  size_t n = 0;
  for (const auto& [key, st] : steps_) n = std::max(n, backend_.planned_bytes(*st->fg.graph));
  return n;
}

Session::Step& Session::step_for(int64_t n_tokens, int64_t n_kv, int64_t n_out, bool sample, bool separate,
                                 bool hidden, bool allowed) {
  const auto key = std::make_tuple(n_tokens, n_kv, n_out, sample, separate, hidden, allowed);
  auto it = steps_.find(key);
  if (it != steps_.end()) {
    it->second->last_used = ++use_clock_;
    return *it->second;
  }
  if (steps_.size() >= size_t(std::max(1, p_.max_graphs))) {
    // Evict the least recently used graph only: the others (and, on a GPU,
    // the weights they hold on the device) stay.
    auto lru = std::min_element(steps_.begin(), steps_.end(),
                                [](const auto& a, const auto& b) { return a.second->last_used < b.second->last_used; });
    backend_.release(*lru->second->fg.graph);
    steps_.erase(lru);
  }
  const auto t0 = std::chrono::steady_clock::now();
  struct Timed {
    std::chrono::steady_clock::time_point t0;
    double& total;
    ~Timed() { total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
  } timed{t0, graph_build_seconds_};
  auto st = std::make_unique<Step>();
  ++graphs_built_;
  st->last_used = ++use_clock_;
  st->fg = model_.build(n_tokens, n_kv, n_out, kv_, separate, p_.tp, hidden ? ForwardOutput::Hidden : ForwardOutput::Logits);
  ForwardGraph& fg = st->fg;
  if (p_.on_graph) p_.on_graph(*fg.graph);
  if (sample) {
    Graph& g = *fg.graph;
    st->sample_params = g.input(DType::F32, {5, n_out}, "sample_params");
    Tensor* logits = fg.logits;
    if (allowed) {
      st->allow = g.input(DType::I32, {(fg.logits->ne[0] + 31) / 32, n_out}, "allow");
      logits = g.allow_tokens(logits, st->allow);
    }
    st->sampled = g.sample(logits, st->sample_params);
    g.mark_output(st->sampled);
  }
  size_t off = 0;
  for (Tensor* t : {fg.tokens, fg.pos, fg.kv_cells, fg.out_rows, fg.mask, fg.mask_swa, st->sample_params, st->allow}) {
    if (!t) continue;
    st->slots.push_back({t, off});
    off += (t->n_bytes() + 63) / 64 * 64;
  }
  st->half = off;
  st->inputs = backend_.alloc(off);
  for (const Step::Slot& s : st->slots) s.t->data = static_cast<char*>(st->inputs->data()) + s.offset;
  st->staging = backend_.alloc_host(2 * off);
  backend_.plan(*fg.graph);
  return *steps_.emplace(key, std::move(st)).first->second;
}

namespace {

// The attention span of a step: the cache's extent, padded so that one
// graph serves many steps (a batched step adds T cells).
int64_t padded_span(int64_t extent, int64_t T, int64_t n_ctx) {
  const int64_t pad = std::max<int64_t>(kKvPad, (32 * T + kKvPad - 1) / kKvPad * kKvPad);
  return std::min(n_ctx, (extent + pad - 1) / pad * pad);
}

}  // namespace

void Session::prepare(int64_t n_tokens) {
  if (on_all_ranks([&](Session& s) { s.prepare(n_tokens); })) return;
  check_not_queued();
  if (n_tokens < 1 || n_past() + n_tokens > p_.n_ctx) throw Error("session: cannot prepare a step past the context");
  const int64_t T = std::min(n_tokens, p_.n_batch);
  // The same n_kv eval() computes after claiming T cells after the current ones.
  step_for(T, padded_span(std::max(kv_.extent(), n_past() + T), T, p_.n_ctx), 1, false, false);
}

void Session::fill_masks(Step& st, const std::vector<int32_t>& pos, const std::vector<int32_t>& seq) {
  const ForwardGraph& fg = st.fg;
  const int64_t n_kv = fg.n_kv;
  const int64_t n_swa = model_.hparams().n_swa;
  float* m = static_cast<float*>(st.host(fg.mask));
  float* ms = fg.mask_swa ? static_cast<float*>(st.host(fg.mask_swa)) : nullptr;
  // A cell is visible to token t if it holds an earlier (or the same)
  // position of t's sequence: all masked, then the sequence's own cells.
  // A non-causal model's token sees all of them (its later tokens are in
  // this step's cells: a sequence is encoded in one step).
  const bool causal = model_.hparams().causal;
  const size_t all = pos.size() * size_t(n_kv);
  Step::Opened& o = st.opened[st.turn];
  if (!o.valid) {
    std::fill_n(m, all, -INFINITY);
    if (ms) std::fill_n(ms, all, -INFINITY);
  } else {
    for (uint32_t i : o.at) {
      m[i] = -INFINITY;
      if (ms) ms[i] = -INFINITY;
    }
  }
  o.at.clear();
  o.valid = all <= UINT32_MAX;
  for (size_t t = 0; t < pos.size(); ++t) {
    const int32_t p = pos[t];
    for (int32_t j : kv_.cells_of(seq[t])) {
      const int32_t cp = kv_.cell_pos(j);
      if (j >= n_kv || (causal && cp > p)) continue;
      const size_t i = size_t(t) * size_t(n_kv) + size_t(j);
      m[i] = 0.0f;
      if (ms && p - cp < n_swa) ms[i] = 0.0f;
      if (o.valid) o.at.push_back(uint32_t(i));
    }
    if (o.at.size() > all / 8) o.valid = false, o.at.clear();  // as cheap to write whole next time
  }
}

Session::Step& Session::run_batch(std::span<const int32_t> tokens, const std::vector<int32_t>& seq,
                                  const std::vector<int32_t>& out_rows, bool sample, const float* sample_params,
                                  const void* token_from, bool hidden, const uint32_t* allow) {
  const size_t T = tokens.size();
  if (p_.stop && p_.stop->load(std::memory_order_relaxed)) throw Cancelled("interrupted");
  const auto host_t0 = std::chrono::steady_clock::now();
  if (!token_from) last_sampled_ = nullptr;  // this step may reuse its memory
  std::vector<int32_t> pos(T), cells(T);
  for (size_t t = 0; t < T; ++t) {
    const auto s = size_t(seq[t]);
    if (seq_len_.size() <= s) seq_len_.resize(s + 1, 0);
    pos[t] = int32_t(seq_len_[s]++);
  }
  if (const int64_t most = model_.hparams().n_pos_max; most > 0)
    for (size_t t = 0; t < T; ++t)
      if (pos[t] >= most) {
        for (size_t u = 0; u < T; ++u) --seq_len_[size_t(seq[u])];
        throw Error("session: position " + std::to_string(pos[t]) + " is past the model's " + std::to_string(most) +
                    " positions (" + model_.hparams().arch + ".context_length)");
      }
  // One sequence: its cells in one claim; several: a cell each.
  size_t claimed = 0;
  if (std::all_of(seq.begin(), seq.end(), [&](int32_t x) { return x == seq[0]; })) {
    cells = kv_.claim(pos, seq[0]);
    if (!cells.empty()) claimed = T;
    cells.resize(T);
  } else {
    for (; claimed < T; ++claimed) {
      const std::vector<int32_t> c = kv_.claim({pos[claimed]}, seq[claimed]);
      if (c.empty()) break;
      cells[claimed] = c[0];
    }
  }
  // Takes the step's tokens back out of the cache.
  auto undo = [&] {
    for (size_t t = claimed; t-- > 0;) kv_.release_last(seq[t]);
    for (size_t t = 0; t < T; ++t) --seq_len_[size_t(seq[t])];
  };
  if (claimed < T) {
    undo();
    throw Error("session: KV cache full");
  }
  try {
    const int64_t n_kv = padded_span(kv_.extent(), int64_t(T), p_.n_ctx);
    std::vector<int32_t> distinct = seq;
    std::sort(distinct.begin(), distinct.end());
    const bool separate = T > 1 && std::adjacent_find(distinct.begin(), distinct.end()) == distinct.end();
    Step& st = step_for(int64_t(T), n_kv, int64_t(out_rows.size()), sample, separate, hidden, allow != nullptr);
    st.turn ^= 1;
    ForwardGraph& fg = st.fg;
    std::memcpy(st.host(fg.tokens), tokens.data(), T * sizeof(int32_t));
    std::memcpy(st.host(fg.pos), pos.data(), T * sizeof(int32_t));
    std::memcpy(st.host(fg.kv_cells), cells.data(), T * sizeof(int32_t));
    std::memcpy(st.host(fg.out_rows), out_rows.data(), out_rows.size() * sizeof(int32_t));
    fill_masks(st, pos, seq);
    if (sample) std::memcpy(st.host(st.sample_params), sample_params, st.sample_params->n_bytes());
    if (st.allow) std::memcpy(st.host(st.allow), allow, st.allow->n_bytes());
    // The staging memory is reused only after the host wait that ends this
    // step, so it outlives the copies (backend contract, rule 3).
    if (p_.tp.size > 1) {  // every rank's host work done before any rank queues (Collective::before_launch)
      backend_.prepare_run(*fg.graph);
      p_.tp.comm->before_launch();
    }
    Queue& q = backend_.queue();
    q.copy_to_device(st.inputs->data(), static_cast<char*>(st.staging->data()) + st.turn * st.half, st.half);
    if (token_from) q.copy_on_device(fg.tokens->data, token_from, sizeof(int32_t));
    q.run(*fg.graph);
    host_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - host_t0).count();
    return st;
  } catch (...) {
    // Stopped (Cancelled) or failed: as if the step had never been asked for.
    undo();
    throw;
  }
}

void Session::check_not_queued() const {
  if (!queued_.empty())
    throw Error("session: " + std::to_string(queued_.size()) + " queued steps (take_sampled() or cancel_queued() first)");
}

void Session::seed_rng(const BackendSampling& s) {
  if (!rng_seeded_ || rng_seed_ != s.seed) {
    rng_.reseed(s.seed);
    rng_seed_ = s.seed;
    rng_seeded_ = true;
  }
}

void Session::queue_sample_next(const BackendSampling& s) {
  if (on_all_ranks([&](Session& r) { r.queue_sample_next(s); })) return;
  if (!last_sampled_) throw Error("session: queue_sample_next() follows eval_sample() or itself");
  if (queued_.size() >= kMaxQueued) throw Error("session: take a queued step before queuing another");
  if (n_past() + 1 > p_.n_ctx)
    throw Error("session: context full (" + std::to_string(p_.n_ctx) + " tokens); use a larger context (-c)");
  seed_rng(s);
  const Rng before = rng_;
  const float u = std::min(float(rng_.next_double()), 0x1.fffffep-1f);
  const float params[5] = {s.temperature, float(s.top_k), s.top_p, s.min_p, u};
  n_logits_ = 0;
  const int32_t placeholder[1] = {0};
  Step& st = run_batch(placeholder, {0}, {0}, true, params, last_sampled_);
  Queue& q = backend_.queue();
  const size_t slot = next_slot_;
  next_slot_ = (next_slot_ + 1) % kMaxQueued;
  q.copy_to_host(static_cast<int32_t*>(queued_ids_->data()) + slot, st.sampled->data, sizeof(int32_t));
  queued_.push_back({q.record(), slot, before});
  last_sampled_ = st.sampled->data;
}

int32_t Session::take_sampled() {
  if (!peers_.empty() && !leading_) {
    std::vector<int32_t> ids(peers_.size() + 1);
    Session* self = this;
    on_all_ranks([&](Session& r) { ids[&r == self ? 0 : size_t(r.p_.tp.rank)] = r.take_sampled(); });
    return same_on_every_rank(ids);
  }
  if (queued_.empty()) throw Error("session: no queued step to take");
  Queued qd = std::move(queued_.front());
  queued_.pop_front();
  qd.done->wait();
  return static_cast<const int32_t*>(queued_ids_->data())[qd.slot];
}

void Session::cancel_queued() {
  if (on_all_ranks([&](Session& r) { r.cancel_queued(); })) return;
  while (!queued_.empty()) {
    queued_.back().done->wait();
    rng_ = queued_.back().rng_before;
    queued_.pop_back();
    kv_.release_last(0);
    --seq_len_[0];
  }
  last_sampled_ = nullptr;
}

std::vector<int32_t> Session::step_sample(std::span<const int32_t> tokens, std::span<const int32_t> seqs,
                                          std::span<const int32_t> out_rows, std::span<const float> params,
                                          std::span<const uint32_t> allow) {
  if (!peers_.empty() && !leading_) {
    std::vector<std::vector<int32_t>> ids(peers_.size() + 1);
    Session* self = this;
    on_all_ranks([&](Session& r) {
      ids[&r == self ? 0 : size_t(r.p_.tp.rank)] = r.step_sample(tokens, seqs, out_rows, params, allow);
    });
    return same_on_every_rank(ids);
  }
  check_step(tokens, seqs, out_rows);
  if (params.size() != 5 * out_rows.size()) throw Error("session: step_sample needs 5 sampling values for each out row");
  // Out rows padded to a power of two (the last one again), so that a
  // server's steps come in fewer shapes; the extra samples are dropped.
  std::vector<int32_t> rows(out_rows.begin(), out_rows.end());
  std::vector<float> prm(params.begin(), params.end());
  const size_t n = rows.size();
  while (rows.size() < std::bit_ceil(n)) {
    rows.push_back(rows.back());
    prm.insert(prm.end(), params.end() - 5, params.end());
  }
  std::vector<int32_t> ids = sample_rows(tokens, std::vector<int32_t>(seqs.begin(), seqs.end()), rows, prm.data(),
                                         padded_allow(allow, n, rows.size()));
  ids.resize(n);
  return ids;
}

const uint32_t* Session::padded_allow(std::span<const uint32_t> allow, size_t rows, size_t padded_rows) {
  if (allow.empty()) return nullptr;
  const size_t words = size_t((n_vocab_ + 31) / 32);
  if (allow.size() != rows * words)
    throw Error("session: allow needs " + std::to_string(words) + " words for each of the " + std::to_string(rows) +
                " sampled rows, got " + std::to_string(allow.size()));
  if (padded_rows == rows) return allow.data();
  allow_padded_.assign(allow.begin(), allow.end());
  for (size_t r = rows; r < padded_rows; ++r)
    allow_padded_.insert(allow_padded_.end(), allow.end() - std::ptrdiff_t(words), allow.end());
  return allow_padded_.data();
}

void Session::check_step(std::span<const int32_t> tokens, std::span<const int32_t> seqs,
                         std::span<const int32_t> out_rows) const {
  check_not_queued();
  const size_t T = tokens.size();
  if (T == 0 || seqs.size() != T) throw Error("session: a step needs a sequence for each token");
  if (int64_t(T) > p_.n_batch)
    throw Error("session: a step of " + std::to_string(T) + " tokens, more than the batch size (" +
                std::to_string(p_.n_batch) + ")");
  if (out_rows.empty()) throw Error("session: a step needs at least one out row");
  for (size_t k = 0; k < out_rows.size(); ++k)
    if (out_rows[k] < 0 || size_t(out_rows[k]) >= T || (k > 0 && out_rows[k] <= out_rows[k - 1]))
      throw Error("session: a step's out rows must be ascending indices into its tokens");
  for (int32_t sq : seqs)
    if (sq < 0) throw Error("session: a negative sequence id");
  check_tokens(tokens);
}

void Session::step_logits(std::span<const int32_t> tokens, std::span<const int32_t> seqs,
                          std::span<const int32_t> out_rows) {
  if (on_all_ranks([&](Session& r) { r.step_logits(tokens, seqs, out_rows); })) return;
  check_step(tokens, seqs, out_rows);
  const size_t row_bytes = size_t(n_vocab_) * sizeof(float), n_out = out_rows.size();
  if (!logits_ || logits_->size() < n_out * row_bytes) logits_ = backend_.alloc_host(n_out * row_bytes);
  n_logits_ = 0;
  std::vector<int32_t> rows(out_rows.begin(), out_rows.end());
  while (rows.size() < std::bit_ceil(n_out)) rows.push_back(rows.back());  // (as step_sample)
  Step& st = run_batch(tokens, std::vector<int32_t>(seqs.begin(), seqs.end()), rows, false, nullptr);
  Queue& q = backend_.queue();
  q.copy_to_host(logits_->data(), st.fg.logits->data, n_out * row_bytes);
  q.synchronize();
  n_logits_ = n_out;
}

void Session::step_hidden(std::span<const int32_t> tokens, std::span<const int32_t> seqs,
                          std::span<const int32_t> out_rows) {
  if (on_all_ranks([&](Session& r) { r.step_hidden(tokens, seqs, out_rows); })) return;
  check_step(tokens, seqs, out_rows);
  const size_t row_bytes = size_t(n_embd()) * sizeof(float), n_out = out_rows.size();
  if (!hidden_ || hidden_->size() < n_out * row_bytes) hidden_ = backend_.alloc_host(n_out * row_bytes);
  n_hidden_ = 0;
  Step& st = run_batch(tokens, std::vector<int32_t>(seqs.begin(), seqs.end()),
                       std::vector<int32_t>(out_rows.begin(), out_rows.end()), false, nullptr, nullptr, true);
  Queue& q = backend_.queue();
  q.copy_to_host(hidden_->data(), st.fg.hidden->data, n_out * row_bytes);
  q.synchronize();
  n_hidden_ = n_out;
}

std::vector<int32_t> Session::sample_rows(std::span<const int32_t> tokens, const std::vector<int32_t>& seqs,
                                          const std::vector<int32_t>& out_rows, const float* params,
                                          const uint32_t* allow) {
  n_logits_ = 0;
  const size_t n_out = out_rows.size();
  // Every earlier copy into sampled_ was waited for, so it can be replaced.
  if (sampled_->size() < n_out * sizeof(int32_t)) sampled_ = backend_.alloc_host(n_out * sizeof(int32_t));
  Step& st = run_batch(tokens, seqs, out_rows, true, params, nullptr, false, allow);
  Queue& q = backend_.queue();
  q.copy_to_host(sampled_->data(), st.sampled->data, n_out * sizeof(int32_t));
  q.synchronize();
  std::vector<int32_t> ids(n_out);
  std::memcpy(ids.data(), sampled_->data(), n_out * sizeof(int32_t));
  return ids;
}

void Session::remove_seq(int32_t seq) {
  if (on_all_ranks([&](Session& r) { r.remove_seq(seq); })) return;
  check_not_queued();
  kv_.remove_seq(seq);
  if (seq >= 0 && size_t(seq) < seq_len_.size()) seq_len_[size_t(seq)] = 0;
  if (seq == 0) last_sampled_ = nullptr;
}

void Session::truncate(int32_t seq, int64_t n) {
  if (on_all_ranks([&](Session& r) { r.truncate(seq, n); })) return;
  check_not_queued();
  const int64_t len = seq_len(seq);
  if (seq < 0 || n < 0 || n > len)
    throw Error("session: cannot keep " + std::to_string(n) + " tokens of sequence " + std::to_string(seq) +
                ", which holds " + std::to_string(len));
  // Cells are claimed in position order: the last ones hold the last positions.
  for (int64_t i = n; i < len; ++i) kv_.release_last(seq);
  seq_len_[size_t(seq)] = n;
  if (seq == 0 && n < len) last_sampled_ = nullptr;
}

void Session::share_prefix(int32_t from, int32_t to, int64_t n) {
  if (on_all_ranks([&](Session& r) { r.share_prefix(from, to, n); })) return;
  check_not_queued();
  if (from < 0 || to < 0) throw Error("session: a negative sequence id");
  if (seq_len(to) != 0) throw Error("session: sequence " + std::to_string(to) + " is not empty");
  if (n > seq_len(from))
    throw Error("session: sequence " + std::to_string(from) + " has " + std::to_string(seq_len(from)) +
                " tokens, not " + std::to_string(n));
  if (n <= 0) return;
  kv_.share(from, to, n);
  if (seq_len_.size() <= size_t(to)) seq_len_.resize(size_t(to) + 1, 0);
  seq_len_[size_t(to)] = n;
}

int64_t Session::reserve(int32_t seq, int64_t n) {
  int64_t got = 0;
  const Session* self = this;
  if (on_all_ranks([&](Session& r) {
        const int64_t g = r.reserve(seq, n);
        if (&r == self) got = g;
      }))
    return got;
  return kv_.reserve(seq, n);
}

void Session::unreserve(int32_t seq) {
  if (on_all_ranks([&](Session& r) { r.unreserve(seq); })) return;
  kv_.unreserve(seq);
}

void Session::fill(int32_t seq, std::span<const int32_t> tokens) {
  if (on_all_ranks([&](Session& r) { r.fill(seq, tokens); })) return;
  check_not_queued();
  if (seq <= 0) throw Error("session: fill() takes sequences other than 0 (eval's)");
  check_tokens(tokens);
  for (size_t start = 0; start < tokens.size(); start += size_t(p_.n_batch)) {
    const size_t T = std::min(tokens.size() - start, size_t(p_.n_batch));
    run_batch(tokens.subspan(start, T), std::vector<int32_t>(T, seq), {int32_t(T - 1)}, false, nullptr);
    backend_.queue().synchronize();
  }
}

std::vector<int32_t> Session::decode_sample(std::span<const int32_t> tokens, std::span<const int32_t> seqs,
                                            const BackendSampling& s, std::span<const uint32_t> allow) {
  if (!peers_.empty() && !leading_) {
    std::vector<std::vector<int32_t>> ids(peers_.size() + 1);
    Session* self = this;
    on_all_ranks([&](Session& r) {
      ids[&r == self ? 0 : size_t(r.p_.tp.rank)] = r.decode_sample(tokens, seqs, s, allow);
    });
    return same_on_every_rank(ids);
  }
  check_not_queued();
  if (tokens.empty() || tokens.size() != seqs.size())
    throw Error("session: decode_sample needs one sequence per token");
  check_tokens(tokens);
  std::vector<int32_t> seq(seqs.begin(), seqs.end()), sorted = seq;
  std::sort(sorted.begin(), sorted.end());
  if (sorted.front() < 0 || std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    throw Error("session: decode_sample's sequences must be distinct and not negative");
  seed_rng(s);
  const size_t T = tokens.size();
  std::vector<float> params(5 * T);
  std::vector<int32_t> out_rows(T);
  for (size_t t = 0; t < T; ++t) {
    const float u = std::min(float(rng_.next_double()), 0x1.fffffep-1f);
    const float row[5] = {s.temperature, float(s.top_k), s.top_p, s.min_p, u};
    std::copy(row, row + 5, params.begin() + std::ptrdiff_t(5 * t));
    out_rows[t] = int32_t(t);
  }
  return sample_rows(tokens, seq, out_rows, params.data(), padded_allow(allow, T, T));
}

void Session::eval(std::span<const int32_t> tokens, std::span<const int32_t> want) {
  if (on_all_ranks([&](Session& r) { r.eval(tokens, want); })) return;
  check_not_queued();
  const int32_t last = int32_t(tokens.size()) - 1;
  std::vector<int32_t> wanted(want.begin(), want.end());
  if (wanted.empty() && !tokens.empty()) wanted.push_back(last);
  for (int32_t w : wanted)
    if (w < 0 || w > last) throw Error("session: wanted logits row " + std::to_string(w) + " is outside the batch");
  check_tokens(tokens);
  if (n_past() + int64_t(tokens.size()) > p_.n_ctx)
    throw Error("session: context full (" + std::to_string(p_.n_ctx) + " tokens); use a larger context (-c)");

  const size_t row_bytes = size_t(n_vocab_) * sizeof(float);
  if (!logits_ || logits_->size() < wanted.size() * row_bytes) logits_ = backend_.alloc_host(std::max<size_t>(1, wanted.size()) * row_bytes);
  std::memset(logits_->data(), 0, wanted.size() * row_bytes);
  n_logits_ = wanted.size();
  Queue& q = backend_.queue();
  for (size_t start = 0; start < tokens.size(); start += size_t(p_.n_batch)) {
    const size_t T = std::min(tokens.size() - start, size_t(p_.n_batch));
    std::vector<int32_t> out_rows, out_slots;
    for (size_t i = 0; i < wanted.size(); ++i) {
      const size_t w = size_t(wanted[i]);
      if (w >= start && w < start + T) {
        out_rows.push_back(int32_t(w - start));
        out_slots.push_back(int32_t(i));
      }
    }
    // The last layer needs at least one row; compute one we then ignore.
    const bool any_out = !out_rows.empty();
    if (!any_out) out_rows.push_back(int32_t(T - 1));
    Step& st = run_batch(tokens.subspan(start, T), std::vector<int32_t>(T, 0), out_rows, false, nullptr);
    if (any_out) {
      const char* src = static_cast<const char*>(st.fg.logits->data);
      for (size_t i = 0; i < out_slots.size(); ++i)
        q.copy_to_host(static_cast<char*>(logits_->data()) + size_t(out_slots[i]) * row_bytes, src + i * row_bytes,
                       row_bytes);
    }
    q.synchronize();
    if (p_.after_step) p_.after_step(*st.fg.graph);
  }
}

int32_t Session::eval_sample(std::span<const int32_t> tokens, const BackendSampling& s) {
  if (!peers_.empty() && !leading_) {
    std::vector<int32_t> ids(peers_.size() + 1);
    Session* self = this;
    on_all_ranks([&](Session& r) { ids[&r == self ? 0 : size_t(r.p_.tp.rank)] = r.eval_sample(tokens, s); });
    return same_on_every_rank(ids);
  }
  check_not_queued();
  if (tokens.empty()) throw Error("session: nothing to evaluate");
  check_tokens(tokens);
  if (n_past() + int64_t(tokens.size()) > p_.n_ctx)
    throw Error("session: context full (" + std::to_string(p_.n_ctx) + " tokens); use a larger context (-c)");
  seed_rng(s);
  n_logits_ = 0;
  Queue& q = backend_.queue();
  // Every batch but the last only fills the cache.
  size_t start = 0;
  for (; tokens.size() - start > size_t(p_.n_batch); start += size_t(p_.n_batch)) {
    run_batch(tokens.subspan(start, size_t(p_.n_batch)), std::vector<int32_t>(size_t(p_.n_batch), 0),
              {int32_t(p_.n_batch - 1)}, false, nullptr);
    q.synchronize();
  }
  const size_t T = tokens.size() - start;
  // The draw as a float below 1 (a double just under 1 would round up to it).
  const float u = std::min(float(rng_.next_double()), 0x1.fffffep-1f);
  const float params[5] = {s.temperature, float(s.top_k), s.top_p, s.min_p, u};
  Step& st = run_batch(tokens.subspan(start, T), std::vector<int32_t>(T, 0), {int32_t(T - 1)}, true, params);
  q.copy_to_host(sampled_->data(), st.sampled->data, sizeof(int32_t));
  q.synchronize();
  last_sampled_ = st.sampled->data;  // where queue_sample_next() takes it from
  int32_t id;
  std::memcpy(&id, sampled_->data(), sizeof id);
  return id;
}

DraftVerdict Session::eval_guesses(int32_t last, std::span<const int32_t> guesses, const BackendSampling& s) {
  if (!peers_.empty() && !leading_) {
    std::vector<std::vector<int32_t>> v(peers_.size() + 1);
    Session* self = this;
    on_all_ranks([&](Session& r) {
      const DraftVerdict d = r.eval_guesses(last, guesses, s);
      v[&r == self ? 0 : size_t(r.p_.tp.rank)] = {d.accepted, d.next};
    });
    const std::vector<int32_t> d = same_on_every_rank(v);
    return {d[0], d[1]};
  }
  check_not_queued();
  std::vector<int32_t> tokens{last};
  tokens.insert(tokens.end(), guesses.begin(), guesses.end());
  check_tokens(tokens);
  const size_t T = tokens.size();
  if (int64_t(T) > p_.n_batch)
    throw Error("session: " + std::to_string(guesses.size()) + " guesses need a step of " + std::to_string(T) +
                " tokens, more than the batch size (" + std::to_string(p_.n_batch) + ")");
  const int64_t n0 = n_past();
  if (n0 + int64_t(T) > p_.n_ctx)
    throw Error("session: context full (" + std::to_string(p_.n_ctx) + " tokens); use a larger context (-c)");
  seed_rng(s);
  const Rng before = rng_;
  std::vector<int32_t> rows(T);
  std::vector<float> params;
  for (size_t r = 0; r < T; ++r) {
    rows[r] = int32_t(r);
    const float u = std::min(float(rng_.next_double()), 0x1.fffffep-1f);
    params.insert(params.end(), {s.temperature, float(s.top_k), s.top_p, s.min_p, u});
  }
  const std::vector<int32_t> ids = step_sample(tokens, std::vector<int32_t>(T, 0), rows, params);
  const DraftVerdict d = verify_greedy(guesses, ids);
  truncate(0, n0 + 1 + d.accepted);
  rng_ = before;
  for (int i = 0; i <= d.accepted; ++i) rng_.next_double();
  return d;
}

}  // namespace weir
