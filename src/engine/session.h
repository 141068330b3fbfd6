// A Session runs a model over one token sequence: it owns the KV cache,
// feeds batches through cached forward graphs and keeps the logits the
// caller asked for.
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"

namespace weir {

struct SessionParams {
  int64_t n_ctx = 4096;    // KV cache cells
  int64_t n_batch = 512;   // tokens per forward step (prompt processing)
  DType kv_type = DType::F32;
};

class Session {
 public:
  Session(const Model& model, Backend& backend, SessionParams p = {});

  // Appends tokens to the sequence and runs them. Logits are kept for the
  // token indices in `want` (default: the last token only), in that order.
  void eval(std::span<const int32_t> tokens, std::span<const int32_t> want = {});
  // Builds and plans the graph of an n_tokens step at the current position
  // without running it: the last part of getting ready to compute a token,
  // which load-time measurements include.
  void prepare(int64_t n_tokens);
  const float* logits(size_t i = 0) const { return logits_.data() + i * size_t(n_vocab_); }
  size_t n_logits() const { return logits_.size() / size_t(n_vocab_); }
  int64_t n_vocab() const { return n_vocab_; }

  int64_t n_past() const { return n_past_; }
  int64_t n_ctx() const { return p_.n_ctx; }
  void reset();

  const Model& model() const { return model_; }
  Backend& backend() { return backend_; }
  const KVCache& kv_cache() const { return kv_; }
  // Largest activation arena among the graphs built so far.
  size_t activation_bytes() const;

 private:
  ForwardGraph& graph_for(int64_t n_tokens, int64_t n_kv, int64_t n_out);
  void fill_masks(ForwardGraph& fg, const std::vector<int32_t>& pos);

  const Model& model_;
  Backend& backend_;
  SessionParams p_;
  KVCache kv_;
  int64_t n_vocab_;
  int64_t n_past_ = 0;
  std::vector<float> logits_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, ForwardGraph> graphs_;
};

}  // namespace weir
