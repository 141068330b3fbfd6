#include "server/generation_engine.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace weir::server {

StepPlan plan_step(const std::vector<ActiveView>& active, size_t budget) {
  StepPlan p;
  p.prompt_taken.assign(active.size(), 0);
  for (size_t i = 0; i < active.size() && p.tokens.size() < budget; ++i) {
    const ActiveView& a = active[i];
    if (!a.decoding) continue;
    p.out_rows.push_back(int32_t(p.tokens.size()));
    p.out_owner.push_back(i);
    p.tokens.push_back(a.last);
    p.seqs.push_back(a.seq);
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

struct GenerationEngine::Active {
  uint64_t id = 0;
  Job job;
  int seq = -1;
  size_t prompt_done = 0;
  bool decoding = false;
  int32_t last = -1;
  int64_t generated = 0;
  Rng rng;
  Utf8Streamer utf8;
  std::unique_ptr<StopStrings> stops;
};

GenerationEngine::GenerationEngine(Session& s, const Tokenizer& tok, EngineOptions o) : s_(s), tok_(tok), o_(o) {
  if (o_.max_sequences < 1) throw Error("server: --parallel must be at least 1");
  for (int q = o_.max_sequences - 1; q >= 0; --q) free_seqs_.push_back(q);
}

GenerationEngine::~GenerationEngine() { stop(); }

void GenerationEngine::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { loop(); });
}

void GenerationEngine::stop() {
  {
    std::lock_guard<std::mutex> lk(m_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint64_t GenerationEngine::submit(Job job) {
  if (job.prompt.empty()) throw Error("the prompt is empty");
  if (int64_t(job.prompt.size()) + 1 > s_.n_ctx())
    throw Error("the prompt has " + std::to_string(job.prompt.size()) + " tokens and the context " +
                std::to_string(s_.n_ctx()) + ": it does not fit");
  auto a = std::make_unique<Active>();
  a->rng.reseed(job.seed);
  a->stops = std::make_unique<StopStrings>(job.stop);
  a->job = std::move(job);
  std::lock_guard<std::mutex> lk(m_);
  if (stopping_) throw QueueFull("the server is shutting down");
  if (queue_.size() >= o_.queue_limit)
    throw QueueFull(std::to_string(queue_.size()) + " requests are waiting already (the limit)");
  a->id = next_id_++;
  const uint64_t id = a->id;
  queue_.push_back(std::move(a));
  ++stats_.requests;
  cv_.notify_all();
  return id;
}

void GenerationEngine::cancel(uint64_t id) {
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
  if (waiting->job.on_done) waiting->job.on_done("cancelled", int64_t(waiting->job.prompt.size()), 0);
}

GenerationEngine::Stats GenerationEngine::stats() const {
  std::lock_guard<std::mutex> lk(m_);
  Stats s = stats_;
  s.queued = queue_.size();
  return s;
}

void GenerationEngine::finish(Active& a, const std::string& reason) {
  std::string tail = a.stops->push(a.utf8.flush());
  tail += a.stops->flush();
  if (!tail.empty() && a.job.on_text) a.job.on_text(tail);
  if (a.job.on_done) a.job.on_done(reason, int64_t(a.job.prompt.size()), a.generated);
  release(a);
}

void GenerationEngine::release(Active& a) {
  s_.remove_seq(a.seq);
  free_seqs_.push_back(a.seq);
  a.seq = -1;
}

void GenerationEngine::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(m_);
      cv_.wait(lk, [&] { return stopping_ || !queue_.empty() || !active_.empty() || !cancelled_.empty(); });
      for (uint64_t id : cancelled_)
        for (auto& a : active_)
          if (a && a->id == id) {
            if (a->job.on_done) a->job.on_done("cancelled", int64_t(a->job.prompt.size()), a->generated);
            release(*a);
            a.reset();
          }
      cancelled_.clear();
      active_.erase(std::remove(active_.begin(), active_.end(), nullptr), active_.end());
      stats_.kv_cells_used = cells_in_use();
      if (stopping_) {  // the queued ones are refused; the running ones finish
        for (auto& q : queue_)
          if (q->job.on_error) q->job.on_error("the server is shutting down");
        queue_.clear();
        if (active_.empty()) return;
      }
      while (!queue_.empty() && !free_seqs_.empty()) {
        auto a = std::move(queue_.front());
        queue_.pop_front();
        a->seq = free_seqs_.back();
        free_seqs_.pop_back();
        active_.push_back(std::move(a));
      }
      stats_.running = active_.size();
    }
    step();
  }
}

bool GenerationEngine::step() {
  if (active_.empty()) return false;
  std::vector<ActiveView> views;
  for (const auto& a : active_)
    views.push_back({a->job.prompt.size(), a->prompt_done, a->decoding, a->last, a->seq, a->job.prompt.data()});
  const StepPlan p = plan_step(views, o_.step_tokens);
  std::vector<float> params;
  for (size_t k = 0; k < p.out_rows.size(); ++k) {
    const size_t o = p.out_owner[k];
    if (o == SIZE_MAX) {
      params.insert(params.end(), {0.0f, 0.0f, 1.0f, 0.0f, 0.5f});
      continue;
    }
    Active& a = *active_[o];
    const float u = std::min(float(a.rng.next_double()), 0x1.fffffep-1f);
    params.insert(params.end(), {a.job.temperature, float(a.job.top_k), a.job.top_p, a.job.min_p, u});
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> ids;
  try {
    ids = s_.step_sample(p.tokens, p.seqs, p.out_rows, params);
  } catch (const std::exception& e) {
    // Nothing of the step went in: every running request fails with why.
    for (auto& a : active_) {
      if (a->job.on_error) a->job.on_error(e.what());
      release(*a);
    }
    std::lock_guard<std::mutex> lk(m_);
    active_.clear();
    stats_.running = 0;
    stats_.kv_cells_used = 0;
    return true;
  }
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uint64_t prompt_in = 0, generated = 0;
  for (size_t i = 0; i < active_.size(); ++i) {
    active_[i]->prompt_done += p.prompt_taken[i];
    prompt_in += p.prompt_taken[i];
  }
  for (size_t k = 0; k < ids.size(); ++k) {
    const size_t o = p.out_owner[k];
    if (o == SIZE_MAX) continue;
    Active& a = *active_[o];
    const int32_t id = ids[size_t(k)];
    ++a.generated;
    ++generated;
    if (id < 0) {
      if (a.job.on_error) a.job.on_error("the model computed no finite logit");
      finish(a, "error");
      continue;
    }
    if (!a.job.ignore_eos && tok_.vocab().is_eog(id)) {
      finish(a, "stop");
      continue;
    }
    const std::string text = a.stops->push(a.utf8.push(tok_.token_to_piece(id, false)));
    if (!text.empty() && a.job.on_text) a.job.on_text(text);
    if (a.stops->stopped()) {
      finish(a, "stop");
      continue;
    }
    if ((a.job.max_tokens > 0 && a.generated >= a.job.max_tokens) || s_.seq_len(a.seq) + 2 > s_.n_ctx()) {
      finish(a, "length");
      continue;
    }
    a.decoding = true;
    a.last = id;
  }
  std::lock_guard<std::mutex> lk(m_);
  active_.erase(std::remove_if(active_.begin(), active_.end(), [](const auto& a) { return a->seq < 0; }), active_.end());
  stats_.running = active_.size();
  stats_.steps++;
  stats_.step_seconds += dt;
  stats_.prompt_tokens += prompt_in;
  stats_.generated_tokens += generated;
  stats_.kv_cells_used = cells_in_use();
  return true;
}

int64_t GenerationEngine::cells_in_use() const {
  int64_t used = 0;
  for (const auto& a : active_)
    if (a) used += s_.seq_len(a->seq);
  return used;
}

}  // namespace weir::server
