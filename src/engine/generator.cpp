#include "engine/generator.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace weir {

namespace {
double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }
// Plain steps between two tries of a costly proposer the rule had given up on.
constexpr int kProbeEvery = 32, kProbeEveryMost = 1024;
constexpr int kProbeGuesses = 2;
}  // namespace

Generator::Generator(Session& s, GeneratorSampling how, DraftProposer* proposer, DraftLengthOptions length)
    : s_(s), how_(how), proposer_(proposer), length_(length) {
  if (!how_.on_backend && !how_.host) throw Error("generator: sampling on the host needs a Sampler");
}

Generator::Generator(Session& s, GeneratorSampling how, DraftProposer* proposer, const DraftLength& learnt)
    : Generator(s, how, proposer, learnt.options()) {
  length_ = learnt;
}

Generator::~Generator() {
  try {
    finish();
  } catch (...) {
  }
}

int32_t Generator::host_sample(const float* logits) {
  for (int64_t i = 0; i < s_.n_vocab(); ++i)
    if (!std::isfinite(logits[i]))
      throw Error("the model computed a non-finite logit (" + std::to_string(logits[i]) + " for token " +
                  std::to_string(i) + ")");
  const int32_t t = how_.host->sample(logits);
  how_.host->accept(t);
  return t;
}

int32_t Generator::start(std::span<const int32_t> context, size_t cached) {
  if (cached >= context.size()) throw Error("generator: nothing to run (every token of the context is cached)");
  if (int64_t(cached) != s_.n_past()) throw Error("generator: the session holds other tokens than `cached` says");
  tokens_.assign(context.begin(), context.end());
  const auto fresh = context.subspan(cached);
  int32_t t;
  if (how_.on_backend) {
    t = s_.eval_sample(fresh, how_.backend);
  } else {
    s_.eval(fresh);
    for (int32_t id : fresh) how_.host->accept(id);
    t = host_sample(s_.logits());
  }
  if (t < 0) throw Error("the model computed no finite logit");
  tokens_.push_back(t);
  ++stats_.tokens;
  ++stats_.steps;
  last_return_ = Clock::now();
  return t;
}

void Generator::score_unchecked() {
  if (unchecked_.empty()) return;
  size_t matched = 0;
  while (matched < unchecked_.size() && unchecked_at_ + matched < tokens_.size() &&
         tokens_[unchecked_at_ + matched] == unchecked_[matched])
    ++matched;
  const bool ended = matched == unchecked_.size() || unchecked_at_ + matched < tokens_.size();
  if (!ended) return;  // still matching, more tokens to come
  length_.observe_unchecked(int(unchecked_.size()), int(matched));
  unchecked_.clear();
}

bool Generator::want_guesses(int most) {
  if (!proposer_ || most <= 0) return false;
  const int k = std::min(length_.next(), most);
  if (proposer_->cheap()) {
    if (k > 0) return !proposer_->propose(tokens_, k).empty();
    keep_unchecked(most);
    return false;
  }
  return k > 0 || ++plain_since_probe_ >= probe_every_;  // guesses() makes the probe
}

void Generator::keep_unchecked(int most) {
  if (unchecked_.empty()) {
    unchecked_ = proposer_->propose(tokens_, std::min(length_.options().draft_max, most));
    unchecked_at_ = tokens_.size();
  }
}

std::vector<int32_t> Generator::guesses(int most) {
  if (!proposer_ || most <= 0) return {};
  const int k = std::min(length_.next(), most);
  if (proposer_->cheap()) {
    if (k == 0) {
      keep_unchecked(most);  // guesses to score, not to check
      return {};
    }
    unchecked_.clear();  // checked guesses score themselves
    return proposer_->propose(tokens_, k);
  }
  int ask = k;
  if (ask == 0 && ++plain_since_probe_ >= probe_every_) {
    ask = std::min(kProbeGuesses, most);
    probing_ = true;
  }
  if (ask == 0) return {};
  plain_since_probe_ = 0;
  const auto t0 = Clock::now();
  std::vector<int32_t> g = proposer_->propose(tokens_, ask);
  const double dt = seconds(Clock::now() - t0);
  stats_.draft_seconds += dt;
  draft_in_step_ += dt;
  length_.observe_draft(int(g.size()), dt);
  return g;
}

int32_t Generator::plain_step(int32_t last) {
  const int32_t one[1] = {last};
  if (how_.on_backend) return s_.eval_sample(one, how_.backend);
  s_.eval(one);
  return host_sample(s_.logits());
}

std::vector<int32_t> Generator::check(int32_t last, const std::vector<int32_t>& g) {
  std::vector<int32_t> out;
  if (how_.on_backend) {
    const DraftVerdict d = s_.eval_guesses(last, g, how_.backend);
    out.assign(g.begin(), g.begin() + d.accepted);
    out.push_back(d.next);
  } else {
    const int64_t n0 = s_.n_past();
    std::vector<int32_t> toks{last};
    toks.insert(toks.end(), g.begin(), g.end());
    std::vector<int32_t> seqs(toks.size(), 0), rows(toks.size());
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = int32_t(i);
    s_.step_logits(toks, seqs, rows);
    // Row by row, as plain decoding would sample them: the sampler's history
    // and draws follow the tokens kept.
    for (size_t i = 0; i < toks.size(); ++i) {
      const int32_t t = host_sample(s_.logits(i));
      out.push_back(t);
      if (i == g.size() || t != g[i]) break;
    }
    s_.truncate(0, n0 + int64_t(out.size()));
  }
  length_.observe(int(g.size()), int(out.size()) - 1);
  if (probing_) {  // a probe that kept nothing waits twice as long for the next
    probe_every_ = out.size() > 1 ? kProbeEvery : std::min(2 * probe_every_, kProbeEveryMost);
    probing_ = false;
  }
  ++stats_.spec_steps;
  stats_.drafted += int64_t(g.size());
  stats_.accepted += int64_t(out.size()) - 1;
  return out;
}

std::vector<int32_t> Generator::next(int max_tokens) {
  if (finished_) throw Error("generator: next() after finish()");
  if (tokens_.empty()) throw Error("generator: next() before start()");
  if (max_tokens < 1) throw Error("generator: next() needs room for a token");
  // Guesses fit the step, the context and what the caller takes.
  const int64_t room = s_.n_ctx() - s_.n_past() - 1;
  const int most = int(std::min<int64_t>({int64_t(max_tokens) - 1, room, s_.n_batch() - 1}));
  std::vector<int32_t> out;
  draft_in_step_ = 0;
  const double built_before = s_.graph_build_seconds();
  enum class Kind { Pipelined, Drain, Spec, Plain } kind;
  int k = 0;
  if (s_.n_queued() > 0) {
    // Pipelined: a step whose input is the last token returned is queued.
    // Decide now whether the step after it is queued too or the generator
    // stops to check guesses once its token is in.
    const bool speculate = want_guesses(most - 1);
    if (!speculate && max_tokens > 1) s_.queue_sample_next(how_.backend);
    kind = s_.n_queued() > 1 ? Kind::Pipelined : Kind::Drain;
    out.push_back(s_.take_sampled());
  } else {
    const int32_t last = tokens_.back();
    std::vector<int32_t> g = guesses(most);
    if (!g.empty()) {
      if (int(g.size()) > most) g.resize(size_t(most));
      kind = Kind::Spec;
      k = int(g.size());
      out = check(last, g);
    } else {
      kind = Kind::Plain;
      out.push_back(plain_step(last));
      if (how_.on_backend && max_tokens > 1 && out[0] >= 0) s_.queue_sample_next(how_.backend);  // back to the pipeline
    }
  }
  // What the step cost, from the return before to this one (the caller's
  // time between included, as in every step): plain decoding's steady
  // pipelined steps are t(0), a step of k guesses t(k). Leaving the
  // pipeline for guesses and coming back to it costs more than pipelined
  // steps would have: that excess is the rule's overhead of a run of
  // guessing steps, observed at the first step of the next run. On the
  // host, plain steps are never pipelined: they are t(0).
  const auto now = Clock::now();
  if (last_return_) {
    // A step that built a graph (a new shape) is timed without it: that is
    // paid once a shape, not a step.
    const double dt = seconds(now - *last_return_) - draft_in_step_ - (s_.graph_build_seconds() - built_before);
    const double t0 = length_.step_cost(0);
    switch (kind) {
      case Kind::Pipelined:
        if (timed_once_.insert(0).second) break;  // a shape's first run may record its graph
        length_.observe_step(0, dt);
        break;
      case Kind::Drain: overhead_ += std::max(0.0, dt - t0); break;
      case Kind::Spec:
        if (timed_once_.insert(k).second) break;
        length_.observe_step(k, dt);
        if (entering_) length_.observe_overhead(overhead_);
        overhead_ = 0;
        break;
      case Kind::Plain:
        if (how_.on_backend) overhead_ += std::max(0.0, dt - t0);
        else length_.observe_step(0, dt);
        break;
    }
  }
  last_return_ = now;
  entering_ = kind != Kind::Spec;  // the next step of guesses begins a run
  for (int32_t t : out)
    if (t < 0) throw Error("the model computed no finite logit");
  tokens_.insert(tokens_.end(), out.begin(), out.end());
  stats_.tokens += int64_t(out.size());
  ++stats_.steps;
  score_unchecked();
  return out;
}

void Generator::finish() {
  if (finished_) return;
  finished_ = true;
  if (s_.n_queued() > 0) s_.cancel_queued();
}

}  // namespace weir
