#include "engine/draft_batch.h"

#include <algorithm>
#include <chrono>

namespace weir {

DraftBatch::DraftBatch(Session& draft, int64_t target_vocab) : s_(draft), target_vocab_(target_vocab) {}

void DraftBatch::release(int32_t seq) {
  const auto it = held_.find(seq);
  if (it == held_.end()) return;
  s_.remove_seq(seq);
  held_.erase(it);
}

std::vector<int32_t> DraftBatch::run(const std::vector<int32_t>& tokens, const std::vector<int32_t>& seqs,
                                     const std::vector<int32_t>& out_rows, size_t sequences) {
  std::vector<float> params;
  for (size_t k = 0; k < out_rows.size(); ++k) params.insert(params.end(), {0.0f, 0.0f, 1.0f, 0.0f, 0.5f});  // greedy
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> ids = s_.step_sample(tokens, seqs, out_rows, params);
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  seconds_ += dt, ++steps_;
  if (tokens.size() <= 2 * sequences) guess_seconds_ += dt, ++guess_steps_;
  return ids;
}

std::vector<std::vector<int32_t>> DraftBatch::propose(std::span<const Request> requests) {
  std::vector<std::vector<int32_t>> out(requests.size());
  struct Going {
    size_t r;     // index into requests
    size_t from;  // its first token the draft's cache lacks
  };
  std::vector<Going> going;
  int64_t need = 0;  // cells the steps take
  for (size_t r = 0; r < requests.size(); ++r) {
    const Request& q = requests[r];
    if (q.max_guesses <= 0 || q.tokens.empty()) continue;
    std::vector<int32_t>& held = held_[q.seq];
    size_t same = 0;
    while (same < held.size() && same < q.tokens.size() && held[same] == q.tokens[same]) ++same;
    if (same == q.tokens.size()) --same;  // at least one token to run, for the guess after it
    if (same < held.size()) {  // its text parted from what the draft holds (refused guesses)
      s_.truncate(q.seq, int64_t(same));
      held.resize(same);
    }
    // A token the draft's vocabulary lacks (vocabularies may differ in a
    // few added tokens at the end): no guesses for this text.
    const bool known = std::all_of(q.tokens.begin() + std::ptrdiff_t(same), q.tokens.end(),
                                   [&](int32_t t) { return t >= 0 && t < s_.n_vocab(); });
    if (!known) continue;
    going.push_back({r, same});
    need += int64_t(q.tokens.size() - same) + q.max_guesses - 1;
  }
  // Short of cells: the sequences not asked about go first (they recompute
  // when next asked), then the last requests get no guesses.
  if (s_.kv_cache().n_free() < need) {
    std::vector<int32_t> idle;
    for (const auto& [seq, held] : held_) {
      bool asked = false;
      for (const Going& g : going) asked |= requests[g.r].seq == seq;
      if (!asked) idle.push_back(seq);
    }
    for (int32_t seq : idle) release(seq);
    while (!going.empty() && s_.kv_cache().n_free() < need) {
      const Request& q = requests[going.back().r];
      need -= int64_t(q.tokens.size() - going.back().from) + q.max_guesses - 1;
      going.pop_back();
    }
  }
  if (going.empty()) return out;
  const size_t batch = size_t(s_.n_batch());
  // Step 1: every sequence's missing tokens, an out row at its last (in
  // steps of at most the draft's batch; a row only where a text ends).
  std::vector<int32_t> tokens, seqs, rows;
  std::vector<size_t> owners;
  auto flush = [&] {
    if (tokens.empty()) return;
    const bool none = rows.empty();  // only the middle of a long text: a row sampled and ignored
    if (none) rows.push_back(int32_t(tokens.size() - 1));
    const std::vector<int32_t> ids = run(tokens, seqs, rows, owners.size());
    if (!none)
      for (size_t k = 0; k < owners.size(); ++k) out[owners[k]].push_back(ids[k]);
    tokens.clear(), seqs.clear(), rows.clear(), owners.clear();
  };
  for (const Going& g : going) {
    const Request& q = requests[g.r];
    for (size_t i = g.from; i < q.tokens.size(); ++i) {
      if (tokens.size() == batch) flush();
      tokens.push_back(q.tokens[i]);
      seqs.push_back(q.seq);
    }
    rows.push_back(int32_t(tokens.size() - 1));
    owners.push_back(g.r);
    held_[q.seq].assign(q.tokens.begin(), q.tokens.end());
  }
  flush();
  // Then a guess a step for the sequences still guessing.
  auto guessing = [&](const Going& g) {
    const std::vector<int32_t>& o = out[g.r];
    return !o.empty() && int(o.size()) < requests[g.r].max_guesses && o.back() >= 0 && o.back() < target_vocab_;
  };
  for (;;) {
    for (const Going& g : going) {
      if (!guessing(g)) continue;
      if (tokens.size() == batch) flush();
      const int32_t seq = requests[g.r].seq;
      tokens.push_back(out[g.r].back());
      seqs.push_back(seq);
      rows.push_back(int32_t(tokens.size() - 1));
      owners.push_back(g.r);
      held_[seq].push_back(out[g.r].back());
    }
    if (tokens.empty()) break;
    flush();
  }
  // A guess the target's vocabulary lacks ends the guesses.
  for (std::vector<int32_t>& o : out) {
    const auto bad = std::find_if(o.begin(), o.end(), [&](int32_t g) { return g < 0 || g >= target_vocab_; });
    o.erase(bad, o.end());
  }
  return out;
}

}  // namespace weir
