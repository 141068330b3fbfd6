#include "engine/batcher.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "core/error.h"
#include "engine/draft_verify.h"
#include "engine/guess_allocation.h"

namespace weir {

StepPlan plan_step(const std::vector<ActiveView>& active, size_t budget) {
  StepPlan p;
  p.prompt_taken.assign(active.size(), 0);
  p.decoded.assign(active.size(), 0);
  p.guessed.assign(active.size(), 0);
  size_t decoding = 0;
  for (const ActiveView& a : active) decoding += a.decoding ? 1 : 0;
  // Guesses take only what every decode token leaves of the budget.
  size_t guess_room = budget > decoding ? budget - decoding : 0;
  for (size_t i = 0; i < active.size() && p.tokens.size() < budget; ++i) {
    const ActiveView& a = active[i];
    if (!a.decoding) continue;
    const size_t g = a.guesses ? std::min(a.n_guesses, guess_room) : 0;
    for (size_t k = 0; k <= g; ++k) {  // [last, g1 .. gk], each an out row
      p.out_rows.push_back(int32_t(p.tokens.size()));
      p.out_owner.push_back(i);
      p.tokens.push_back(k == 0 ? a.last : a.guesses[k - 1]);
      p.seqs.push_back(a.seq);
    }
    p.decoded[i] = 1;
    p.guessed[i] = g;
    guess_room -= g;
  }
  for (size_t i = 0; i < active.size() && p.tokens.size() < budget; ++i) {
    const ActiveView& a = active[i];
    if (a.decoding || a.prompt_done >= a.prompt_len) continue;
    const size_t n = std::min(budget - p.tokens.size(), a.prompt_len - a.prompt_done);
    for (size_t k = 0; k < n; ++k) {
      p.seqs.push_back(a.seq);
      p.tokens.push_back(a.prompt ? a.prompt[a.prompt_done + k] : -1);
    }
    p.prompt_taken[i] = n;
    if (a.prompt_done + n == a.prompt_len) {
      p.out_rows.push_back(int32_t(p.tokens.size() - 1));
      p.out_owner.push_back(i);
    }
  }
  if (!p.tokens.empty() && p.out_rows.empty()) {  // only a prompt's middle: one row sampled and ignored
    p.out_rows.push_back(int32_t(p.tokens.size() - 1));
    p.out_owner.push_back(SIZE_MAX);
  }
  return p;
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

struct Batcher::Active {
  uint64_t id = 0;
  Job job;
  int seq = -1;
  // The tokens to put in before the next sample: the prompt, or after a
  // set-back everything the request had; prompt_done of them are in.
  std::vector<int32_t> prefill;
  size_t prompt_done = 0;
  std::vector<int32_t> in_cache;  // the tokens its sequence holds, in order
  bool decoding = false;
  int32_t last = -1;
  int64_t generated = 0;
  int64_t cached = 0;  // prompt tokens the prefix cache gave it
  std::unordered_map<int32_t, int> counts;  // of generated tokens (penalties)
  Rng rng;
  Utf8Streamer utf8;
  std::unique_ptr<StopStrings> stops;
  std::unique_ptr<GrammarState> grammar;  // with job.grammar
  // Speculative decoding: the guesses this step checks after `last`; the
  // random stream before the step drew for them (the draws of rows not used
  // go back); its acceptance (DraftLength's decayed counts); guesses the
  // rule did not check, scored against the tokens that come (`matched` of
  // them so far) so that its acceptance is known before paying for it.
  std::vector<int32_t> guesses;
  Rng rng_before;
  DraftLength acceptance;
  std::vector<int32_t> unchecked;
  int matched = 0;
  int plain_steps = 0;  // decode steps since it last checked guesses (a draft's probes)
  // How often each run of ngram.min_n tokens occurs in its prompt and
  // output (the first `indexed` of them counted): a lookup can find nothing
  // unless the last such run occurred before, and most steps of most
  // requests are cut short here instead of scanning the whole text.
  std::unordered_map<uint64_t, uint32_t> grams;
  size_t indexed = 0;
};

namespace {

// The run of n tokens ending at `end` (exclusive) as a key: exact for n <= 2,
// else a hash (a collision only costs a lookup that finds nothing).
uint64_t gram_key(const std::vector<int32_t>& t, size_t end, int n) {
  if (n == 1) return uint32_t(t[end - 1]);
  if (n == 2) return uint64_t(uint32_t(t[end - 2])) << 32 | uint32_t(t[end - 1]);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = end - size_t(n); i < end; ++i) h = (h ^ uint32_t(t[i])) * 1099511628211ull;
  return h;
}

// The most guesses a request may check next: a step of k guesses generates
// up to k + 1 tokens, no more than max_tokens allows, and none past the
// context (plain decoding ends once its sequence holds n_ctx - 2 tokens).
int64_t guess_cap(const Job& job, int64_t generated, size_t held, int64_t n_ctx, int draft_max) {
  int64_t cap = draft_max;
  if (job.max_tokens > 0) cap = std::min<int64_t>(cap, job.max_tokens - generated - 1);
  return std::min<int64_t>(cap, n_ctx - int64_t(held) - 2);
}

}  // namespace

Batcher::Batcher(Session& s, const Tokenizer& tok, BatcherOptions o)
    : s_(s), tok_(tok), o_(o), grammars_(tok, s.n_vocab()), grammar_workers_(o.grammar_threads) {
  if (o_.max_sequences < 1) throw Error("server: --parallel must be at least 1");
  DraftLength check(o_.spec.length);  // (throws naming --draft-min / --draft-max when out of range)
  if (o_.spec.mode == SpecMode::Ngram) proposer_ = std::make_unique<NgramProposer>(o_.spec.ngram);
  if (o_.spec.mode == SpecMode::Draft) {
    if (!o_.draft) throw Error("the batcher's draft model mode needs the draft's session (BatcherOptions::draft)");
    draft_ = std::make_unique<DraftBatch>(*o_.draft, s.n_vocab());
  }
  o_.kept_prefixes = std::max(0, o_.kept_prefixes);
  for (int q = o_.max_sequences + o_.kept_prefixes - 1; q >= 0; --q) free_seqs_.push_back(q);
}

Batcher::~Batcher() { stop(); }

void Batcher::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { loop(); });
}

void Batcher::stop() {
  {
    std::lock_guard<std::mutex> lk(m_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint64_t Batcher::submit(Job job) {
  std::vector<Job> one;
  one.push_back(std::move(job));
  return submit_all(std::move(one)).front();
}

std::vector<uint64_t> Batcher::submit_all(std::vector<Job> jobs) {
  std::vector<std::unique_ptr<Active>> made;
  for (Job& job : jobs) {
    if (job.prompt.empty()) throw Error("the prompt is empty");
    if (int64_t(job.prompt.size()) + 1 > s_.n_ctx())
      throw Error("the prompt has " + std::to_string(job.prompt.size()) + " tokens and the context " +
                  std::to_string(s_.n_ctx()) + ": it does not fit");
    auto a = std::make_unique<Active>();
    a->rng.reseed(job.seed);
    a->acceptance = DraftLength(o_.spec.length);
    a->stops = std::make_unique<StopStrings>(job.stop);
    if (job.grammar) a->grammar = std::make_unique<GrammarState>(job.grammar);
    a->prefill = job.prompt;
    a->job = std::move(job);
    made.push_back(std::move(a));
  }
  std::lock_guard<std::mutex> lk(m_);
  if (stopping_) throw QueueFull("the server is shutting down");
  if (queue_.size() + made.size() > o_.queue_limit)
    throw QueueFull(std::to_string(queue_.size()) + " requests are waiting already (the limit" +
                    (made.size() > 1 ? " is " + std::to_string(o_.queue_limit) + "; this request's choices are " +
                                           std::to_string(made.size()) + ")"
                                     : std::string(")")));
  std::vector<uint64_t> ids;
  for (auto& a : made) {
    a->id = next_id_++;
    ids.push_back(a->id);
    queue_.push_back(std::move(a));
    ++stats_.requests;
  }
  cv_.notify_all();
  return ids;
}

void Batcher::cancel(uint64_t id) {
  std::unique_ptr<Active> waiting;
  {
    std::lock_guard<std::mutex> lk(m_);
    for (auto it = queue_.begin(); it != queue_.end(); ++it)
      if ((*it)->id == id) {
        waiting = std::move(*it);
        queue_.erase(it);
        break;
      }
    if (!waiting) {
      cancelled_.push_back(id);
      cv_.notify_all();
      return;
    }
  }
  // Never started: it ends here, on the caller's thread.
  if (waiting->job.on_done) waiting->job.on_done("cancelled", {int64_t(waiting->job.prompt.size()), waiting->generated, waiting->cached});
}

Batcher::Stats Batcher::stats() const {
  std::lock_guard<std::mutex> lk(m_);
  Stats s = stats_;
  s.queued = queue_.size();
  return s;
}

void Batcher::finish(Active& a, const std::string& reason) {
  std::string tail = a.stops->push(a.utf8.flush());
  tail += a.stops->flush();
  if (!tail.empty() && a.job.on_text) a.job.on_text(tail);
  if (a.job.on_done) a.job.on_done(reason, {int64_t(a.job.prompt.size()), a.generated, a.cached});
  release(a, reason != "error");
}

void Batcher::release(Active& a, bool keep) {
  if (a.seq < 0) return;
  if (draft_) draft_->release(a.seq);  // (kept prefixes have no draft cells: the draft shares nothing)
  if (keep && o_.reuse_prefixes && o_.kept_prefixes > 0 && !a.in_cache.empty()) {
    // A kept prefix that this one begins with says nothing more: let it go.
    for (size_t k = kept_.size(); k-- > 0;)
      if (common_prefix(kept_[k].tokens, a.in_cache) == kept_[k].tokens.size()) {
        s_.remove_seq(kept_[k].seq);
        free_seqs_.push_back(kept_[k].seq);
        kept_.erase(kept_.begin() + std::ptrdiff_t(k));
      }
    if (int(kept_.size()) >= o_.kept_prefixes) let_go_kept();
    s_.unreserve(a.seq);
    kept_.push_back({a.seq, std::move(a.in_cache), ++use_clock_});
  } else {
    s_.remove_seq(a.seq);
    free_seqs_.push_back(a.seq);
  }
  a.seq = -1;
  a.in_cache.clear();
}

bool Batcher::let_go_kept() {
  if (kept_.empty()) return false;
  auto lru = std::min_element(kept_.begin(), kept_.end(), [](const Kept& x, const Kept& y) { return x.used < y.used; });
  s_.remove_seq(lru->seq);
  free_seqs_.push_back(lru->seq);
  kept_.erase(lru);
  return true;
}

int Batcher::take_seq() {
  if (free_seqs_.empty()) let_go_kept();
  const int q = free_seqs_.back();
  free_seqs_.pop_back();
  return q;
}

void Batcher::make_room(size_t cells) {
  while (size_t(s_.kv_cache().n_free()) < cells && let_go_kept()) {
  }
}

bool Batcher::take_prefix(Active& a) {
  if (!o_.reuse_prefixes) return true;
  // What is computed: the tokens every other sequence holds.
  size_t best = 0;
  int from = -1;
  Kept* kept = nullptr;
  for (auto& k : kept_) {
    const size_t n = common_prefix(k.tokens, a.prefill);
    if (n > best) best = n, from = k.seq, kept = &k;
  }
  for (const auto& b : active_) {
    const size_t n = common_prefix(b->in_cache, a.prefill);
    if (n > best) best = n, from = b->seq, kept = nullptr;
  }
  // What a running prompt will have computed in a step or so.
  for (const auto& b : active_)
    if (b->prompt_done < b->prefill.size() && common_prefix(b->prefill, a.prefill) >= best + kWaitGain) return false;
  best = std::min(best, a.prefill.size() - 1);  // at least one token to compute: its logits sample the next
  if (best >= kMinShare) {
    s_.share_prefix(from, a.seq, int64_t(best));
    a.in_cache.assign(a.prefill.begin(), a.prefill.begin() + std::ptrdiff_t(best));
    a.prompt_done = best;
    if (kept) kept->used = ++use_clock_;
  }
  return true;
}

void Batcher::admit() {
  while (!queue_.empty() && int(active_.size()) < o_.max_sequences) {
    Active& a = *queue_.front();
    a.seq = take_seq();
    if (!take_prefix(a)) {  // waits for a prompt being computed
      free_seqs_.push_back(a.seq);
      a.seq = -1;
      break;
    }
    // Room for what it has left to compute, and a token for each running request.
    const size_t need = a.prefill.size() - a.prompt_done + active_.size() + 1;
    make_room(need);
    if (size_t(s_.kv_cache().n_free()) < need && !active_.empty()) {  // waits for cells
      release(a, false);
      a.prompt_done = 0;
      break;
    }
    // Its own cells together: what is left of the prompt and the answer.
    const int64_t room = s_.n_ctx() - int64_t(a.prefill.size());
    const int64_t answer = a.job.max_tokens > 0 ? std::min<int64_t>(a.job.max_tokens - a.generated, room) : std::min<int64_t>(1024, room);
    // Kept prefixes go (least recently used first) until such a run is free:
    // cells scattered through the cache would make attention read far more.
    const int64_t want = int64_t(a.prefill.size() - a.prompt_done) + std::max<int64_t>(answer, 0);
    while (s_.reserve(a.seq, want) < want && let_go_kept()) {
    }
    stats_.reused_tokens += a.prompt_done;
    if (a.generated == 0) a.cached = int64_t(a.prompt_done);  // (a set-back request's first admission counts)
    active_.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
}

void Batcher::set_back(size_t i) {
  std::unique_ptr<Active> a = std::move(active_[i]);
  active_.erase(active_.begin() + std::ptrdiff_t(i));
  // Everything it had, to compute again; the token it sampled last goes in
  // at the end, so its next sample follows on.
  std::vector<int32_t> all = std::move(a->in_cache);
  if (a->decoding) all.push_back(a->last);
  release(*a, false);
  a->prefill = std::move(all);
  a->prompt_done = 0;
  a->decoding = false;
  std::lock_guard<std::mutex> lk(m_);
  ++stats_.set_back;
  queue_.push_front(std::move(a));
}

std::vector<int32_t> Batcher::run_step(const StepPlan& p, std::vector<HostSample>& host) {
  std::vector<float> params;
  bool on_host = false;
  for (size_t k = 0; k < p.out_rows.size(); ++k) {
    const size_t o = p.out_owner[k];
    if (o == SIZE_MAX) {
      params.insert(params.end(), {0.0f, 0.0f, 1.0f, 0.0f, 0.5f});
      continue;
    }
    Active& a = *active_[o];
    const float u = std::min(float(a.rng.next_double()), 0x1.fffffep-1f);
    params.insert(params.end(), {a.job.temperature, float(a.job.top_k), a.job.top_p, a.job.min_p, u});
    on_host |= a.job.on_host();
  }
  // The grammars' masks, a row each out row (all ones for rows without).
  const int64_t words = allow_words(s_.n_vocab());
  std::vector<GrammarState*> states;
  std::vector<uint32_t*> rows;
  for (size_t k = 0; k < p.out_rows.size(); ++k)
    if (p.out_owner[k] != SIZE_MAX && active_[p.out_owner[k]]->grammar) states.push_back(active_[p.out_owner[k]]->grammar.get());
  const bool masked = !states.empty();
  if (masked) {
    allow_.resize(p.out_rows.size() * size_t(words));
    for (size_t k = 0; k < p.out_rows.size(); ++k) {
      uint32_t* row = &allow_[k * size_t(words)];
      if (p.out_owner[k] != SIZE_MAX && active_[p.out_owner[k]]->grammar) rows.push_back(row);
      else std::fill_n(row, words, ~0u);
    }
    grammar_workers_.fill_allowed(states, rows);
  }
  if (!on_host) return s_.step_sample(p.tokens, p.seqs, p.out_rows, params, masked ? std::span<const uint32_t>(allow_) : std::span<const uint32_t>());
  // Every row of the step on the host: the backend's draw is the CPU's sample row.
  s_.step_logits(p.tokens, p.seqs, p.out_rows);
  std::vector<int32_t> ids(p.out_rows.size(), -1);
  host.assign(p.out_rows.size(), {});
  std::vector<float> row(size_t(s_.n_vocab()));
  // A request's row after guess i samples as plain decoding would once the
  // guesses up to i were generated: with them in the penalties' counts
  // (taken out again after its last row).
  std::vector<std::pair<Active*, int32_t>> counted;
  auto uncount = [&] {
    for (auto& [a, id] : counted)
      if (--a->counts[id] == 0) a->counts.erase(id);
    counted.clear();
  };
  for (size_t k = 0; k < p.out_rows.size(); ++k) {
    const size_t o = p.out_owner[k];
    if (k > 0 && o != p.out_owner[k - 1]) uncount();
    if (o == SIZE_MAX) continue;
    if (k > 0 && o == p.out_owner[k - 1]) {  // the row after guess `counted.size()`
      Active& g = *active_[o];
      const int32_t id = g.guesses[counted.size()];
      ++g.counts[id];
      counted.push_back({&g, id});
    }
    const Job& j = active_[o]->job;
    std::memcpy(row.data(), s_.logits(k), row.size() * sizeof(float));
    for (const auto& [id, bias] : j.logit_bias)
      if (id >= 0 && size_t(id) < row.size()) row[size_t(id)] += bias;
    if (masked && active_[o]->grammar) {
      const uint32_t* a = &allow_[k * size_t(words)];
      for (size_t v = 0; v < row.size(); ++v)
        if (!((a[v >> 5] >> (v & 31)) & 1u)) row[v] = -INFINITY;
    }
    HostSampling hs;
    hs.temperature = params[5 * k], hs.top_k = int(params[5 * k + 1]), hs.top_p = params[5 * k + 2];
    hs.min_p = params[5 * k + 3], hs.u = params[5 * k + 4];
    hs.presence_penalty = j.presence_penalty, hs.frequency_penalty = j.frequency_penalty;
    hs.top_n = j.top_logprobs;
    host[k] = sample_on_host(row, hs, active_[o]->counts);
    ids[k] = host[k].id;
  }
  uncount();
  return ids;
}

void Batcher::update_gauges() {
  stats_.running = active_.size();
  stats_.kept_prefixes = kept_.size();
  stats_.kv_cells_used = s_.kv_cache().n_cells() - s_.kv_cache().n_free();
  stats_.graphs_built = s_.graphs_built();
  stats_.graph_build_seconds = s_.graph_build_seconds();
  stats_.step_host_seconds = s_.host_seconds();
  if (draft_) {
    stats_.draft_steps = uint64_t(draft_->steps());
    stats_.draft_seconds = draft_->seconds();
  }
  running_.clear();
  for (const auto& a : active_)
    running_.push_back({a->id, a->seq, a->job.prompt.size(), std::min(a->prompt_done, a->job.prompt.size()), a->generated,
                        a->job.max_tokens, a->grammar != nullptr});
}

std::vector<Batcher::Running> Batcher::running() const {
  std::lock_guard<std::mutex> lk(m_);
  return running_;
}

void Batcher::submit_work(SessionWork w) {
  std::lock_guard<std::mutex> lk(m_);
  if (stopping_) throw QueueFull("the server is shutting down");
  if (works_.size() >= std::max<size_t>(1, o_.queue_limit))
    throw QueueFull(std::to_string(works_.size()) + " embedding requests are waiting already (the limit)");
  works_.push_back(std::move(w));
  cv_.notify_all();
}

void Batcher::run_works(std::deque<SessionWork>& works) {
  const int32_t first_seq = int32_t(o_.max_sequences + o_.kept_prefixes);  // above every id free_seqs_ holds
  for (SessionWork& w : works) {
    make_room(w.cells);
    try {
      w.run(s_, first_seq);
    } catch (...) {
      if (w.on_error) w.on_error(std::current_exception());
    }
  }
  works.clear();
}

void Batcher::loop() {
  for (;;) {
    std::deque<SessionWork> works;
    {
      std::unique_lock<std::mutex> lk(m_);
      cv_.wait(lk, [&] { return stopping_ || !queue_.empty() || !active_.empty() || !cancelled_.empty() || !works_.empty(); });
      for (uint64_t id : cancelled_)
        for (auto& a : active_)
          if (a && a->id == id) {
            if (a->job.on_done) a->job.on_done("cancelled", {int64_t(a->job.prompt.size()), a->generated, a->cached});
            release(*a, true);
            a.reset();
          }
      cancelled_.clear();
      active_.erase(std::remove(active_.begin(), active_.end(), nullptr), active_.end());
      if (stopping_) {  // the queued ones are refused; the running ones finish
        for (auto& q : queue_)
          if (q->job.on_error) q->job.on_error("the server is shutting down");
        queue_.clear();
        for (SessionWork& w : works_)
          if (w.on_error) w.on_error(std::make_exception_ptr(QueueFull("the server is shutting down")));
        works_.clear();
        if (active_.empty()) {
          update_gauges();
          return;
        }
      }
      admit();
      update_gauges();
      works.swap(works_);
      if (active_.empty() && works.empty()) continue;  // (only waiting: cannot happen with nothing running, see admit)
    }
    run_works(works);
    step();
  }
}

GuessStep Batcher::step_without_guesses(size_t* prompt_left) const {
  // Every decode token and the prompt chunks that fit; the guesses get what
  // they leave of the budget.
  size_t decoding = 0;
  *prompt_left = 0;
  for (const auto& a : active_) {
    if (a->decoding) ++decoding;
    else *prompt_left += a->prefill.size() - a->prompt_done;
  }
  GuessStep step;
  step.tokens = std::min(o_.step_tokens, decoding + *prompt_left);
  step.yield = double(decoding);
  step.room = o_.step_tokens - step.tokens;
  step.draft_min = o_.spec.length.draft_min;
  return step;
}

void Batcher::propose_guesses() {
  for (auto& a : active_) a->guesses.clear();
  if (draft_) return propose_draft_guesses();
  if (!proposer_) return;
  size_t prompt_left = 0;
  const GuessStep step = step_without_guesses(&prompt_left);
  std::vector<GuessCandidate> candidates;
  std::vector<Active*> who;
  for (auto& p : active_) {
    Active& a = *p;
    if (!a.decoding || a.grammar) continue;
    const int64_t cap = guess_cap(a.job, a.generated, a.in_cache.size(), s_.n_ctx(), o_.spec.length.draft_max);
    if (cap <= 0) continue;
    a.in_cache.push_back(a.last);  // the prompt and what was generated, in order
    const std::vector<int32_t>& text = a.in_cache;
    const int n = o_.spec.ngram.min_n;
    for (; a.indexed < text.size(); ++a.indexed)
      if (a.indexed + 1 >= size_t(n)) ++a.grams[gram_key(text, a.indexed + 1, n)];
    const bool seen = text.size() > size_t(n) && a.grams[gram_key(text, text.size(), n)] > 1;
    if (seen) a.guesses = proposer_->propose(text, int(cap));
    a.in_cache.pop_back();
    if (a.guesses.empty()) continue;
    candidates.push_back({a.acceptance.acceptance(), int(a.guesses.size())});
    who.push_back(&a);
  }
  const std::vector<int> k = allocate_guesses(candidates, step, prompt_left > 0 ? prompt_times_ : decode_times_);
  for (size_t r = 0; r < who.size(); ++r) {
    Active& a = *who[r];
    if (k[r] == 0 && a.unchecked.empty()) a.unchecked = a.guesses, a.matched = 0;  // scored for free
    a.guesses.resize(size_t(k[r]));
  }
}

void Batcher::propose_draft_guesses() {
  size_t prompt_left = 0;
  GuessStep step = step_without_guesses(&prompt_left);
  step.draft_step_seconds = draft_step_seconds_;
  // Every guess the draft could make, by each request's acceptance; the
  // draft runs only for those the rule gives some, as deep as the most.
  std::vector<GuessCandidate> candidates;
  std::vector<Active*> who;
  for (auto& p : active_) {
    Active& a = *p;
    if (!a.decoding || a.grammar) continue;
    const int64_t cap = guess_cap(a.job, a.generated, a.in_cache.size(), s_.n_ctx(), o_.spec.length.draft_max);
    if (cap <= 0) continue;
    candidates.push_back({a.acceptance.acceptance(), int(cap)});
    who.push_back(&a);
  }
  std::vector<int> k = allocate_guesses(candidates, step, prompt_left > 0 ? prompt_times_ : decode_times_);
  size_t room = step.room;  // what the guesses leave of the step (a probe needs room too)
  for (int n : k) room -= size_t(n);
  std::vector<DraftBatch::Request> asks;
  std::vector<Active*> asking;
  for (size_t r = 0; r < who.size(); ++r) {
    Active& a = *who[r];
    if (k[r] == 0 && a.plain_steps >= kDraftProbeEvery && room >= size_t(kDraftProbeGuesses)) {
      k[r] = std::min(kDraftProbeGuesses, candidates[r].available);
      room -= size_t(k[r]);
    }
    if (k[r] == 0) continue;
    a.in_cache.push_back(a.last);  // the prompt and what was generated, in order (taken off below)
    asks.push_back({a.seq, a.in_cache, k[r]});
    asking.push_back(&a);
  }
  if (asks.empty()) return;
  const int64_t steps_before = draft_->guess_steps();
  const double seconds_before = draft_->guess_seconds();
  std::vector<std::vector<int32_t>> guesses = draft_->propose(asks);
  for (size_t i = 0; i < asking.size(); ++i) {
    asking[i]->in_cache.pop_back();
    asking[i]->guesses = std::move(guesses[i]);
  }
  // A draft step's time a guess deep, a decayed mean (weight 0.9 for the
  // past, as StepTimes); a new prompt's draft step is not one of them.
  const int64_t steps = draft_->guess_steps() - steps_before;
  if (steps > 0) {
    const double per_step = (draft_->guess_seconds() - seconds_before) / double(steps);
    draft_step_seconds_ = draft_step_seconds_ > 0 ? 0.9 * draft_step_seconds_ + 0.1 * per_step : per_step;
  }
}

bool Batcher::emit(Active& a, int32_t id, const HostSample* host, int64_t held) {
  ++a.generated;
  if (id >= 0) ++a.counts[id];
  if (host && a.job.top_logprobs >= 0 && a.job.on_token && id >= 0) a.job.on_token(*host);
  if (id < 0) {
    if (a.job.on_error)
      a.job.on_error(a.grammar && a.grammar->broken() ? "the grammar refused the token sampled"
                     : a.grammar                      ? "the grammar allows no token the model can give"
                                                      : "the model computed no finite logit");
    finish(a, "error");
    return false;
  }
  if (a.grammar) a.grammar->accept_later(id);  // (taken with the next step's masks, in parallel)
  if (!a.unchecked.empty()) {  // guesses not checked, scored against what came
    if (id == a.unchecked[size_t(a.matched)] && ++a.matched < int(a.unchecked.size())) {
    } else {
      a.acceptance.observe_unchecked(int(a.unchecked.size()), a.matched);
      a.unchecked.clear();
      a.matched = 0;
    }
  }
  if (!a.job.ignore_eos && tok_.vocab().is_eog(id)) {
    finish(a, "stop");
    return false;
  }
  const std::string text = a.stops->push(a.utf8.push(tok_.token_to_piece(id, false)));
  if (!text.empty() && a.job.on_text) a.job.on_text(text);
  if (a.stops->stopped()) {
    finish(a, "stop");
    return false;
  }
  if ((a.job.max_tokens > 0 && a.generated >= a.job.max_tokens) || held + 2 > s_.n_ctx()) {
    finish(a, "length");
    return false;
  }
  return true;
}

bool Batcher::step() {
  if (active_.empty()) return false;
  propose_guesses();
  StepPlan p;
  for (;;) {
    std::vector<ActiveView> views;
    for (const auto& a : active_)
      views.push_back({a->prefill.size(), a->prompt_done, a->decoding, a->last, a->seq, a->prefill.data(),
                       a->guesses.data(), a->guesses.size()});
    p = plan_step(views, o_.step_tokens);
    // Guesses take free cells only: short of them, the guesses go first
    // (before any kept prefix or running request).
    bool guessing = false;
    for (size_t g : p.guessed) guessing |= g > 0;
    if (guessing && size_t(s_.kv_cache().n_free()) < p.tokens.size()) {
      for (auto& a : active_) a->guesses.clear();
      continue;
    }
    make_room(p.tokens.size());
    if (size_t(s_.kv_cache().n_free()) >= p.tokens.size() || active_.size() == 1) break;
    set_back(active_.size() - 1);  // the newest waits
  }
  size_t guessed = 0;
  for (size_t i = 0; i < active_.size(); ++i) {
    Active& a = *active_[i];
    a.guesses.resize(p.guessed[i]);  // (what the budget left)
    a.rng_before = a.rng;
    guessed += p.guessed[i];
  }
  const double building_before = s_.graph_build_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> ids;
  std::vector<HostSample> host;
  try {
    ids = run_step(p, host);
  } catch (const std::exception& e) {
    // Nothing of the step went in: every running request fails with why.
    for (auto& a : active_) {
      if (a->job.on_error) a->job.on_error(e.what());
      release(*a, false);
    }
    std::lock_guard<std::mutex> lk(m_);
    active_.clear();
    update_gauges();
    return true;
  }
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // What a step of its size costs once its graph is built.
  size_t prompt_tokens = 0;
  for (size_t n : p.prompt_taken) prompt_tokens += n;
  (prompt_tokens > 0 ? prompt_times_ : decode_times_)
      .observe(p.tokens.size(), dt - (s_.graph_build_seconds() - building_before));
  if (o_.step_log) {
    size_t decoded = 0;
    for (uint8_t d : p.decoded) decoded += d;
    char line[256];
    std::snprintf(line, sizeof line, "%.6f,%zu,%zu,%zu,%zu,%zu,%lld,%lld,%.6f,%zu",
                  std::chrono::duration<double>(t0.time_since_epoch()).count(), active_.size(), p.tokens.size(), decoded,
                  p.tokens.size() - decoded - guessed, p.out_rows.size(), static_cast<long long>(s_.kv_cache().extent()),
                  static_cast<long long>(s_.kv_cache().n_free()), dt, guessed);
    o_.step_log(line);
  }
  uint64_t prompt_in = 0, generated = 0, drafted = 0, accepted = 0;
  for (size_t i = 0; i < active_.size(); ++i) {
    Active& a = *active_[i];
    if (p.decoded[i]) a.in_cache.push_back(a.last);
    const auto from = a.prefill.begin() + std::ptrdiff_t(a.prompt_done);
    a.in_cache.insert(a.in_cache.end(), from, from + std::ptrdiff_t(p.prompt_taken[i]));
    a.prompt_done += p.prompt_taken[i];
    prompt_in += p.prompt_taken[i];
  }
  for (size_t k = 0; k < ids.size();) {
    const size_t o = p.out_owner[k];
    size_t rows = 1;  // a request's rows are consecutive: its decode token's, then one a guess
    while (o != SIZE_MAX && k + rows < ids.size() && p.out_owner[k + rows] == o) ++rows;
    if (o == SIZE_MAX) {
      k += rows;
      continue;
    }
    Active& a = *active_[o];
    DraftVerdict v{0, ids[k]};
    if (rows == 1 && p.decoded[o]) ++a.plain_steps;
    if (rows > 1) {
      v = verify_greedy(a.guesses, std::span<const int32_t>(ids).subspan(k, rows));
      a.acceptance.observe(int(rows - 1), v.accepted);
      a.plain_steps = 0;
      drafted += rows - 1;
      accepted += uint64_t(v.accepted);
      a.in_cache.insert(a.in_cache.end(), a.guesses.begin(), a.guesses.begin() + v.accepted);
      s_.truncate(a.seq, int64_t(a.in_cache.size()));  // the refused guesses' cells go
      // The draws of the rows used stay taken; the rest go back.
      a.rng = a.rng_before;
      for (int j = 0; j <= v.accepted; ++j) a.rng.next_u64();
    }
    // The tokens in order, each as plain decoding would have emitted it
    // (its sequence then holding what came before it).
    const int64_t held = int64_t(a.in_cache.size()) - v.accepted;
    bool going = true;
    for (int j = 0; j <= v.accepted && going; ++j) {
      ++generated;
      const int32_t id = j < v.accepted ? a.guesses[size_t(j)] : v.next;
      going = emit(a, id, host.empty() ? nullptr : &host[k + size_t(j)], held + j);
    }
    if (going) {
      a.decoding = true;
      a.last = v.next;
    }
    a.guesses.clear();
    k += rows;
  }
  std::lock_guard<std::mutex> lk(m_);
  active_.erase(std::remove_if(active_.begin(), active_.end(), [](const auto& a) { return a->seq < 0; }), active_.end());
  stats_.steps++;
  stats_.step_seconds += dt;
  stats_.prompt_tokens += prompt_in;
  stats_.generated_tokens += generated;
  stats_.guesses_drafted += drafted;
  stats_.guesses_accepted += accepted;
  update_gauges();
  return true;
}

}  // namespace weir
