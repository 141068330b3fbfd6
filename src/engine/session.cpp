#include "engine/session.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"

namespace weir {
namespace {

// Attention spans are padded so one graph serves many decode steps.
constexpr int64_t kKvPad = 256;
constexpr size_t kMaxCachedGraphs = 8;

}  // namespace

Session::Session(const Model& model, Backend& backend, SessionParams p)
    : model_(model), backend_(backend), p_(p), kv_(model.hparams(), p.n_ctx, p.kv_type),
      n_vocab_(model.hparams().n_vocab) {
  if (!backend.host_visible_memory())
    throw Error("session: backend " + backend.name() + " is not supported by the session yet");
  if (p_.n_batch <= 0) throw Error("session: batch size must be positive");
}

void Session::reset() {
  kv_.clear();
  n_past_ = 0;
  logits_.clear();
}

size_t Session::activation_bytes() const {
  size_t n = 0;
  for (const auto& [key, fg] : graphs_) n = std::max(n, backend_.planned_bytes(*fg.graph));
  return n;
}

ForwardGraph& Session::graph_for(int64_t n_tokens, int64_t n_kv, int64_t n_out) {
  const auto key = std::make_tuple(n_tokens, n_kv, n_out);
  auto it = graphs_.find(key);
  if (it != graphs_.end()) return it->second;
  if (graphs_.size() >= kMaxCachedGraphs) graphs_.clear();
  ForwardGraph fg = model_.build(n_tokens, n_kv, n_out, kv_);
  backend_.plan(*fg.graph);
  return graphs_.emplace(key, std::move(fg)).first->second;
}

void Session::prepare(int64_t n_tokens) {
  if (n_tokens < 1 || n_past_ + n_tokens > p_.n_ctx) throw Error("session: cannot prepare a step past the context");
  const int64_t T = std::min(n_tokens, p_.n_batch);
  // The same n_kv eval() computes after claiming T cells after the current ones.
  const int64_t n_kv = std::min(p_.n_ctx, (std::max(kv_.extent(), n_past_ + T) + kKvPad - 1) / kKvPad * kKvPad);
  graph_for(T, n_kv, 1);
}

void Session::fill_masks(ForwardGraph& fg, const std::vector<int32_t>& pos) {
  const int64_t n_kv = fg.n_kv;
  const int64_t n_swa = model_.hparams().n_swa;
  float* m = static_cast<float*>(fg.mask->data);
  float* ms = fg.mask_swa ? static_cast<float*>(fg.mask_swa->data) : nullptr;
  const float ninf = -INFINITY;
  for (size_t t = 0; t < pos.size(); ++t) {
    const int32_t p = pos[t];
    for (int64_t j = 0; j < n_kv; ++j) {
      const int32_t cp = kv_.cell_pos(j);
      const bool visible = cp >= 0 && kv_.cell_seq(j) == 0 && cp <= p;
      m[size_t(t) * size_t(n_kv) + size_t(j)] = visible ? 0.0f : ninf;
      if (ms) ms[size_t(t) * size_t(n_kv) + size_t(j)] = visible && p - cp < n_swa ? 0.0f : ninf;
    }
  }
}

void Session::eval(std::span<const int32_t> tokens, std::span<const int32_t> want) {
  const int32_t last = int32_t(tokens.size()) - 1;
  std::vector<int32_t> wanted(want.begin(), want.end());
  if (wanted.empty() && !tokens.empty()) wanted.push_back(last);
  for (int32_t w : wanted)
    if (w < 0 || w > last) throw Error("session: wanted logits row " + std::to_string(w) + " is outside the batch");
  for (int32_t id : tokens)
    if (id < 0 || id >= n_vocab_) throw Error("session: token id " + std::to_string(id) + " is outside the vocabulary");
  if (n_past_ + int64_t(tokens.size()) > p_.n_ctx)
    throw Error("session: context full (" + std::to_string(p_.n_ctx) + " tokens); use a larger context (-c)");

  logits_.assign(wanted.size() * size_t(n_vocab_), 0.0f);
  Queue& q = backend_.queue();
  for (size_t start = 0; start < tokens.size(); start += size_t(p_.n_batch)) {
    const size_t T = std::min(tokens.size() - start, size_t(p_.n_batch));
    std::vector<int32_t> pos(T), out_rows, out_slots;
    for (size_t t = 0; t < T; ++t) pos[t] = int32_t(n_past_ + int64_t(t));
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

    std::vector<int32_t> cells = kv_.claim(pos, 0);
    if (cells.empty()) throw Error("session: KV cache full");
    const int64_t n_kv = std::min(p_.n_ctx, (kv_.extent() + kKvPad - 1) / kKvPad * kKvPad);
    ForwardGraph& fg = graph_for(int64_t(T), n_kv, int64_t(out_rows.size()));

    std::memcpy(fg.tokens->data, tokens.data() + start, T * sizeof(int32_t));
    std::memcpy(fg.pos->data, pos.data(), T * sizeof(int32_t));
    std::memcpy(fg.kv_cells->data, cells.data(), T * sizeof(int32_t));
    std::memcpy(fg.out_rows->data, out_rows.data(), out_rows.size() * sizeof(int32_t));
    fill_masks(fg, pos);
    q.run(*fg.graph);
    q.synchronize();
    n_past_ += int64_t(T);
    if (any_out) {
      const float* src = static_cast<const float*>(fg.logits->data);
      for (size_t i = 0; i < out_slots.size(); ++i)
        std::memcpy(logits_.data() + size_t(out_slots[i]) * size_t(n_vocab_), src + i * size_t(n_vocab_),
                    size_t(n_vocab_) * sizeof(float));
    }
  }
}

}  // namespace weir
