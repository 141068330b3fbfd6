// Shapes and GGUF metadata of real models, for random-weight synthetic files
// (weir synth). The numbers are those of the models' published config.json
// files and of the GGUF files llama.cpp's converter makes from them.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace weir {

struct SynthPreset {
  std::string name;  // "llama-3.1-8b"
  std::string arch;  // general.architecture: llama, qwen2, qwen3, qwen3moe, gemma2, gemma3, phi3, gpt-oss, ...
  std::string display_name;  // general.name
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;  // per attention head (k and v)
  int64_t n_ff = 0;
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  bool tied_embeddings = false;  // no output.weight: the output matrix is token_embd
  bool write_head_dim = false;   // <arch>.attention.key_length / value_length
  bool write_rope_dim = false;   // <arch>.rope.dimension_count
  bool write_vocab_size = false; // <arch>.vocab_size
  bool qkv_bias = false;         // blk.N.attn_{q,k,v}.bias (qwen2)
  bool qk_norm = false;          // blk.N.attn_{q,k}_norm.weight (qwen3, gemma3)
  bool post_norms = false;       // blk.N.post_attention_norm / post_ffw_norm (gemma3)
  int64_t n_swa = 0;             // <arch>.attention.sliding_window (gemma3; phi3 writes it unused)
  // gemma2: <arch>.attn_logit_softcapping and final_logit_softcapping when > 0.
  float attn_softcap = 0.0f;
  float final_softcap = 0.0f;
  // phi3: blk.N.attn_qkv (q, k, v rows) for attn_q/k/v, and blk.N.ffn_up of
  // 2 n_ff rows (gate, then up) for ffn_gate/ffn_up; and
  // <arch>.rope.scaling.original_context_length when rope_orig_ctx > 0.
  bool fused_qkv = false;
  bool fused_gate_up = false;
  int64_t rope_orig_ctx = 0;
  // Llama 3 rope scaling (rope_type "llama3"): stored as the rope_freqs.weight
  // tensor of per-frequency factors; factor 0 means none.
  float rope_llama3_factor = 0.0f;
  float rope_llama3_low_freq = 1.0f;
  float rope_llama3_high_freq = 4.0f;
  int64_t rope_llama3_orig_ctx = 8192;
  // Mixture of experts (n_expert > 0): every layer's FFN is n_expert experts
  // n_ff_exp wide, n_expert_used a token, and a router (ffn_gate_inp).
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  bool write_ff_exp = false;  // <arch>.expert_feed_forward_length (qwen3moe; mixtral's is feed_forward_length)
  // YaRN rope scaling (rope.scaling.type "yarn") with this factor and
  // original context rope_orig_ctx when > 0 (gpt-oss). gpt-oss's layout
  // (biases, attention sinks, post_attention_norm as the FFN's norm, the
  // experts' biases) goes with its architecture name.
  float rope_yarn_factor = 0.0f;
  // BERT encoders (arch bert, nomic-bert): LayerNorms with biases
  // (<arch>.attention.layer_norm_epsilon), non-causal, a WordPiece vocabulary,
  // <arch>.pooling_type (1 mean, 2 cls). bert: absolute positions
  // (position_embd, n_ctx_train rows), q/k/v/output/FFN biases, GELU FFN;
  // nomic-bert: fused attn_qkv, rope, SwiGLU FFN, no biases.
  float layer_norm_eps = 1e-12f;
  int pooling_type = 0;
};

// Whether p is a BERT encoder (bert, nomic-bert).
bool is_bert_preset(const SynthPreset& p);

// Every preset, real models first, then one small "tiny" per architecture
// for tests.
const std::vector<SynthPreset>& synth_presets();
// The preset called `name` of architecture `arch`; throws weir::Error listing
// the presets of that architecture when there is none (or it is of another).
const SynthPreset& find_synth_preset(std::string_view arch, std::string_view name);
// The architectures that have presets, in first-appearance order.
std::vector<std::string> synth_archs();

}  // namespace weir
