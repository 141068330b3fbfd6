// Hyper-parameters of a transformer, read from GGUF metadata ("<arch>.*").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace weir {

class GGUFFile;

struct HParams {
  std::string arch;
  int64_t n_vocab = 0;  // from the tokenizer (Model sets it)
  int64_t n_ctx_train = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim_k = 0;
  int64_t head_dim_v = 0;
  int64_t n_ff = 0;
  float rms_eps = 1e-6f;
  int64_t n_rot = 0;               // rotated dims per head (rope.dimension_count)
  float rope_base = 10000.0f;      // global-attention layers
  float rope_freq_scale = 1.0f;    // 1 / rope.scaling.factor for linear scaling
  float rope_base_swa = 10000.0f;  // sliding-window layers
  float rope_freq_scale_swa = 1.0f;
  int64_t n_swa = 0;               // sliding window (0: none)
  std::vector<bool> is_swa;        // per layer
  float attn_scale = 1.0f;         // applied to q before attention
  float embd_scale = 1.0f;         // applied to the token embeddings
  // false: a token sees every token of its sequence, later ones too (BERT
  // encoders), so a sequence is encoded in one forward step.
  bool causal = true;
  bool embeddings_only = false;    // no LM head (BERT encoders): a graph of logits is refused
  int64_t n_pos_max = 0;           // positions a sequence may take at most (BERT's position table; 0: no bound)
  // Mixture of experts (0 experts: a dense FFN): each token's FFN is the
  // weighted sum of n_expert_used of n_expert expert FFNs n_ff_exp wide.
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;

  int64_t n_embd_k() const { return head_dim_k * n_head_kv; }
  int64_t n_embd_v() const { return head_dim_v * n_head_kv; }

  // Reads "<arch>.*" keys common to decoder-only transformers; errors name
  // the missing key. Architecture specifics are set by the model builder.
  static HParams from_gguf(const GGUFFile& f);
};

}  // namespace weir
