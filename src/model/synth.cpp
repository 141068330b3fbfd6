#include "model/synth.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/file_checks.h"
#include "core/gguf.h"
#include "core/gguf_writer.h"
#include "core/quant/random_blocks.h"
#include "core/thread_group.h"

namespace weir {
namespace {

SynthTensor tensor(std::string name, std::initializer_list<int64_t> ne, float mean, float std) {
  SynthTensor t;
  t.name = std::move(name);
  t.n_dims = int(ne.size());
  int i = 0;
  for (int64_t n : ne) t.ne[i++] = n;
  t.mean = mean;
  t.std = std;
  return t;
}

constexpr size_t kChunkBytes = size_t(4) << 20;  // one piece of generated data

// A BERT encoder's tensors (is_bert_preset), in the converter's order:
// post-norm LayerNorms (weight ~1, bias ~0), so any embedding scale works.
std::vector<SynthTensor> bert_tensors(const SynthPreset& p) {
  const int64_t E = p.n_embd, V = p.n_vocab, F = p.n_ff;
  if (E <= 0 || V <= 0 || F <= 0 || p.n_layer <= 0 || p.n_head <= 0 || p.head_dim * p.n_head != E)
    throw Error("synth preset '" + p.name + "': invalid shape");
  const bool nomic = p.arch == "nomic-bert";
  const float in_std = 1.0f / std::sqrt(float(E)), ff_std = 1.0f / std::sqrt(float(F));
  const float norm_std = 0.02f, bias_std = 0.02f;
  std::vector<SynthTensor> r;
  r.push_back(tensor("token_embd.weight", {E, V}, 0, 1.0f));
  if (!nomic) r.push_back(tensor("position_embd.weight", {E, p.n_ctx_train}, 0, 0.5f));
  r.push_back(tensor("token_types.weight", {E, 2}, 0, 0.5f));
  r.push_back(tensor("token_embd_norm.weight", {E}, 1, norm_std));
  r.push_back(tensor("token_embd_norm.bias", {E}, 0, bias_std));
  for (int64_t il = 0; il < p.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    if (nomic) {
      r.push_back(tensor(b + "attn_qkv.weight", {E, 3 * E}, 0, in_std));
    } else {
      for (const char* w : {"attn_q", "attn_k", "attn_v"}) {
        r.push_back(tensor(b + w + ".weight", {E, E}, 0, in_std));
        r.push_back(tensor(b + w + ".bias", {E}, 0, bias_std));
      }
    }
    r.push_back(tensor(b + "attn_output.weight", {E, E}, 0, in_std));
    if (!nomic) r.push_back(tensor(b + "attn_output.bias", {E}, 0, bias_std));
    r.push_back(tensor(b + "attn_output_norm.weight", {E}, 1, norm_std));
    r.push_back(tensor(b + "attn_output_norm.bias", {E}, 0, bias_std));
    r.push_back(tensor(b + "ffn_up.weight", {E, F}, 0, in_std));
    if (nomic) r.push_back(tensor(b + "ffn_gate.weight", {E, F}, 0, in_std));
    else r.push_back(tensor(b + "ffn_up.bias", {F}, 0, bias_std));
    r.push_back(tensor(b + "ffn_down.weight", {F, E}, 0, ff_std));
    if (!nomic) r.push_back(tensor(b + "ffn_down.bias", {E}, 0, bias_std));
    r.push_back(tensor(b + "layer_output_norm.weight", {E}, 1, norm_std));
    r.push_back(tensor(b + "layer_output_norm.bias", {E}, 0, bias_std));
  }
  return r;
}

// gpt-oss's tensors (llama.cpp's converter names and order): biases on q,
// k, v, the output and every expert, a sink logit per head, the router with
// its bias; post_attention_norm is the FFN's norm.
std::vector<SynthTensor> gpt_oss_tensors(const SynthPreset& p) {
  const int64_t E = p.n_embd, V = p.n_vocab, D = p.head_dim, NE = p.n_expert, FE = p.n_ff_exp;
  const int64_t Q = D * p.n_head, KV = D * p.n_head_kv;
  if (E <= 0 || V <= 0 || D <= 0 || NE <= 0 || FE <= 0 || p.n_layer <= 0 || p.n_head <= 0 || p.n_head_kv <= 0 ||
      p.n_head % p.n_head_kv != 0)
    throw Error("synth preset '" + p.name + "': invalid shape");
  const float in_std = 1.0f / std::sqrt(float(E));
  const float res = 1.0f / std::sqrt(2.0f * float(p.n_layer));
  const float norm_std = 0.02f, bias_std = 0.02f;
  std::vector<SynthTensor> r;
  r.push_back(tensor("token_embd.weight", {E, V}, 0, 1.0f));
  for (int64_t il = 0; il < p.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    r.push_back(tensor(b + "attn_norm.weight", {E}, 1, norm_std));
    r.push_back(tensor(b + "attn_q.weight", {E, Q}, 0, in_std));
    r.push_back(tensor(b + "attn_q.bias", {Q}, 0, bias_std));
    r.push_back(tensor(b + "attn_k.weight", {E, KV}, 0, in_std));
    r.push_back(tensor(b + "attn_k.bias", {KV}, 0, bias_std));
    r.push_back(tensor(b + "attn_v.weight", {E, KV}, 0, in_std));
    r.push_back(tensor(b + "attn_v.bias", {KV}, 0, bias_std));
    r.push_back(tensor(b + "attn_output.weight", {Q, E}, 0, res / std::sqrt(float(Q))));
    r.push_back(tensor(b + "attn_output.bias", {E}, 0, bias_std));
    r.push_back(tensor(b + "attn_sinks.weight", {p.n_head}, 0, 1.0f));
    r.push_back(tensor(b + "post_attention_norm.weight", {E}, 1, norm_std));
    r.push_back(tensor(b + "ffn_gate_inp.weight", {E, NE}, 0, in_std));
    r.push_back(tensor(b + "ffn_gate_inp.bias", {NE}, 0, bias_std));
    r.push_back(tensor(b + "ffn_gate_exps.weight", {E, FE, NE}, 0, in_std));
    r.push_back(tensor(b + "ffn_gate_exps.bias", {FE, NE}, 0, bias_std));
    r.push_back(tensor(b + "ffn_up_exps.weight", {E, FE, NE}, 0, in_std));
    r.push_back(tensor(b + "ffn_up_exps.bias", {FE, NE}, 0, bias_std));
    r.push_back(tensor(b + "ffn_down_exps.weight", {FE, E, NE}, 0, res / std::sqrt(float(FE))));
    r.push_back(tensor(b + "ffn_down_exps.bias", {E, NE}, 0, bias_std));
  }
  r.push_back(tensor("output_norm.weight", {E}, 1, norm_std));
  r.push_back(tensor("output.weight", {E, V}, 0, in_std));
  return r;
}

}  // namespace

std::vector<SynthTensor> synth_tensors(const SynthPreset& p) {
  if (is_bert_preset(p)) return bert_tensors(p);
  if (p.arch == "gpt-oss") return gpt_oss_tensors(p);
  const int64_t E = p.n_embd, V = p.n_vocab, F = p.n_ff, D = p.head_dim;
  const int64_t Q = D * p.n_head, KV = D * p.n_head_kv;
  if (E <= 0 || V <= 0 || F <= 0 || D <= 0 || p.n_layer <= 0 || p.n_head <= 0 || p.n_head_kv <= 0 ||
      p.n_head % p.n_head_kv != 0)
    throw Error("synth preset '" + p.name + "': invalid shape");
  const float in_std = 1.0f / std::sqrt(float(E));
  const float res = 1.0f / std::sqrt(2.0f * float(p.n_layer));  // residual-writing projections
  const float norm_std = 0.02f;
  // Token embeddings. With a separate output matrix: std 1 (the residual
  // stream starts at RMS 1). Tied to the output, the logit of the current
  // token is e.x / rms(x) ~ E std^2 / rms(x) against a std of sqrt(E) std for
  // the others, so a large embedding makes greedy decoding repeat the last
  // token forever; the stds below keep that ratio near 2:
  // - llama-style (added as is; the layers add about RMS 0.5-1): std 1/sqrt(E);
  // - gemma2/3 (scaled by sqrt(E); each of the 2 L post-normed sublayers adds
  //   RMS 1): embedding RMS c in the stream with E c^2 = 4 (c^2 + 2 L).
  float embd_std = 1.0f;
  if (p.arch == "gemma3" || p.arch == "gemma2") {
    const float c = std::min(1.0f, std::sqrt(8.0f * float(p.n_layer) / float(E - 4)));
    embd_std = c / std::sqrt(float(E));
  } else if (p.tied_embeddings) {
    embd_std = 1.0f / std::sqrt(float(E));
  }

  std::vector<SynthTensor> r;
  if (p.rope_llama3_factor > 0) {
    SynthTensor t = tensor("rope_freqs.weight", {D / 2}, 0, 0);
    t.rope_freqs = true;
    r.push_back(t);
  }
  r.push_back(tensor("token_embd.weight", {E, V}, 0, embd_std));
  for (int64_t il = 0; il < p.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    r.push_back(tensor(b + "attn_norm.weight", {E}, 1, norm_std));
    if (p.fused_qkv) {
      r.push_back(tensor(b + "attn_qkv.weight", {E, Q + 2 * KV}, 0, in_std));
    } else {
      r.push_back(tensor(b + "attn_q.weight", {E, Q}, 0, in_std));
      r.push_back(tensor(b + "attn_k.weight", {E, KV}, 0, in_std));
      r.push_back(tensor(b + "attn_v.weight", {E, KV}, 0, in_std));
    }
    if (p.qkv_bias) {
      r.push_back(tensor(b + "attn_q.bias", {Q}, 0, 0.02f));
      r.push_back(tensor(b + "attn_k.bias", {KV}, 0, 0.02f));
      r.push_back(tensor(b + "attn_v.bias", {KV}, 0, 0.02f));
    }
    if (p.qk_norm) {
      r.push_back(tensor(b + "attn_q_norm.weight", {D}, 1, norm_std));
      r.push_back(tensor(b + "attn_k_norm.weight", {D}, 1, norm_std));
    }
    r.push_back(tensor(b + "attn_output.weight", {Q, E}, 0, res / std::sqrt(float(Q))));
    if (p.post_norms) r.push_back(tensor(b + "post_attention_norm.weight", {E}, 1, norm_std));
    r.push_back(tensor(b + "ffn_norm.weight", {E}, 1, norm_std));
    if (p.n_expert > 0) {  // router logits of std ~1; each expert as a dense FFN
      const int64_t NE = p.n_expert, FE = p.n_ff_exp > 0 ? p.n_ff_exp : F;
      r.push_back(tensor(b + "ffn_gate_inp.weight", {E, NE}, 0, in_std));
      r.push_back(tensor(b + "ffn_gate_exps.weight", {E, FE, NE}, 0, in_std));
      r.push_back(tensor(b + "ffn_up_exps.weight", {E, FE, NE}, 0, in_std));
      r.push_back(tensor(b + "ffn_down_exps.weight", {FE, E, NE}, 0, res / std::sqrt(float(FE))));
    } else if (p.fused_gate_up) {
      r.push_back(tensor(b + "ffn_up.weight", {E, 2 * F}, 0, in_std));
      r.push_back(tensor(b + "ffn_down.weight", {F, E}, 0, res / std::sqrt(float(F))));
    } else {
      r.push_back(tensor(b + "ffn_gate.weight", {E, F}, 0, in_std));
      r.push_back(tensor(b + "ffn_up.weight", {E, F}, 0, in_std));
      r.push_back(tensor(b + "ffn_down.weight", {F, E}, 0, res / std::sqrt(float(F))));
    }
    if (p.post_norms) r.push_back(tensor(b + "post_ffw_norm.weight", {E}, 1, norm_std));
  }
  r.push_back(tensor("output_norm.weight", {E}, 1, norm_std));
  if (!p.tied_embeddings) r.push_back(tensor("output.weight", {E, V}, 0, in_std));
  return r;
}

std::vector<float> llama3_rope_factors(const SynthPreset& p) {
  // Meta's llama 3 rope scaling: wavelengths shorter than orig_ctx /
  // high_freq_factor keep their frequency, longer than orig_ctx /
  // low_freq_factor are divided by `factor`, and in between the two are
  // blended linearly in orig_ctx / wavelength. GGUF stores the divisor.
  std::vector<float> f;
  const double factor = p.rope_llama3_factor, lo = p.rope_llama3_low_freq, hi = p.rope_llama3_high_freq;
  const double ctx = double(p.rope_llama3_orig_ctx);
  for (int64_t i = 0; i < p.head_dim / 2; ++i) {
    const double freq = 1.0 / std::pow(double(p.rope_base), double(2 * i) / double(p.head_dim));
    const double wavelen = 2.0 * M_PI / freq;
    if (wavelen < ctx / hi) {
      f.push_back(1.0f);
    } else if (wavelen > ctx / lo) {
      f.push_back(float(factor));
    } else {
      const double smooth = (ctx / wavelen - lo) / (hi - lo);
      f.push_back(float(1.0 / ((1.0 - smooth) / factor + smooth)));
    }
  }
  return f;
}

void write_synth_metadata(GGUFWriter& w, const SynthPreset& p, FileType ft) {
  const std::string a = p.arch + ".";
  w.set_str("general.architecture", p.arch);
  w.set_str("general.type", "model");
  w.set_str("general.name", "synthetic " + p.display_name + " (random weights)");
  if (is_bert_preset(p)) {  // the keys llama.cpp's BertModel / NomicBertModel converters write
    w.set_u32(a + "context_length", uint32_t(p.n_ctx_train));
    w.set_u32(a + "embedding_length", uint32_t(p.n_embd));
    w.set_u32(a + "block_count", uint32_t(p.n_layer));
    w.set_u32(a + "feed_forward_length", uint32_t(p.n_ff));
    w.set_u32(a + "attention.head_count", uint32_t(p.n_head));
    w.set_f32(a + "attention.layer_norm_epsilon", p.layer_norm_eps);
    w.set_bool(a + "attention.causal", false);
    w.set_u32(a + "pooling_type", uint32_t(p.pooling_type));
    if (p.arch == "nomic-bert") w.set_f32(a + "rope.freq_base", p.rope_base);
    w.set_u32("general.file_type", uint32_t(ft));
    if (ft != FileType::ALL_F32 && ft != FileType::MOSTLY_F16 && ft != FileType::MOSTLY_BF16)
      w.set_u32("general.quantization_version", 2);
    return;
  }
  w.set_u32(a + "context_length", uint32_t(p.n_ctx_train));
  w.set_u32(a + "embedding_length", uint32_t(p.n_embd));
  w.set_u32(a + "block_count", uint32_t(p.n_layer));
  w.set_u32(a + "feed_forward_length", uint32_t(p.n_ff));
  w.set_u32(a + "attention.head_count", uint32_t(p.n_head));
  w.set_u32(a + "attention.head_count_kv", uint32_t(p.n_head_kv));
  w.set_f32(a + "rope.freq_base", p.rope_base);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", p.rms_eps);
  if (p.write_head_dim) {
    w.set_u32(a + "attention.key_length", uint32_t(p.head_dim));
    w.set_u32(a + "attention.value_length", uint32_t(p.head_dim));
  }
  if (p.n_swa > 0) w.set_u32(a + "attention.sliding_window", uint32_t(p.n_swa));
  if (p.attn_softcap > 0) w.set_f32(a + "attn_logit_softcapping", p.attn_softcap);
  if (p.final_softcap > 0) w.set_f32(a + "final_logit_softcapping", p.final_softcap);
  if (p.write_vocab_size) w.set_u32(a + "vocab_size", uint32_t(p.n_vocab));
  if (p.write_rope_dim) w.set_u32(a + "rope.dimension_count", uint32_t(p.head_dim));
  if (p.rope_orig_ctx > 0) w.set_u32(a + "rope.scaling.original_context_length", uint32_t(p.rope_orig_ctx));
  if (p.rope_yarn_factor > 0) {
    w.set_str(a + "rope.scaling.type", "yarn");
    w.set_f32(a + "rope.scaling.factor", p.rope_yarn_factor);
  }
  if (p.n_expert > 0) {
    w.set_u32(a + "expert_count", uint32_t(p.n_expert));
    w.set_u32(a + "expert_used_count", uint32_t(p.n_expert_used));
    if (p.write_ff_exp) w.set_u32(a + "expert_feed_forward_length", uint32_t(p.n_ff_exp));
  }
  w.set_u32("general.file_type", uint32_t(ft));
  if (ft != FileType::ALL_F32 && ft != FileType::MOSTLY_F16 && ft != FileType::MOSTLY_BF16)
    w.set_u32("general.quantization_version", 2);
}

void write_synthetic_vocab(GGUFWriter& w, int64_t n) {
  if (n < 260) throw Error("a synthetic vocabulary needs at least 260 tokens, not " + std::to_string(n));
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  tokens.reserve(size_t(n));
  auto add = [&](std::string t, int32_t type) {
    if (int64_t(tokens.size()) >= n) return;
    tokens.push_back(std::move(t));
    scores.push_back(type == 1 ? -float(tokens.size()) : 0.0f);
    types.push_back(type);
  };
  add("<unk>", 2);  // UNKNOWN
  add("<s>", 3);    // CONTROL
  add("</s>", 3);
  static const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) add(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">", 6);  // BYTE
  const std::string sp = "\xe2\x96\x81";  // U+2581, SentencePiece's space
  add(sp, 1);
  for (int c = 33; c < 127; ++c) add(std::string(1, char(c)), 1);
  // Then lower-case words of growing length, each with and without "▁".
  for (int len = 1; int64_t(tokens.size()) < n; ++len) {
    std::string word(size_t(len), 'a');
    while (int64_t(tokens.size()) < n) {
      add(sp + word, 1);
      if (len > 1) add(word, 1);
      int i = len - 1;  // next word: odometer over a..z
      while (i >= 0 && word[size_t(i)] == 'z') word[size_t(i--)] = 'a';
      if (i < 0) break;
      ++word[size_t(i)];
    }
  }
  w.set_str("tokenizer.ggml.model", "llama");
  w.set_str("tokenizer.ggml.pre", "default");
  w.set_str_array("tokenizer.ggml.tokens", tokens);
  w.set_f32_array("tokenizer.ggml.scores", scores);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  w.set_bool("tokenizer.ggml.add_eos_token", false);
}

void write_synthetic_wpm_vocab(GGUFWriter& w, int64_t n) {
  if (n < 300) throw Error("a synthetic WordPiece vocabulary needs at least 300 tokens, not " + std::to_string(n));
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  auto add = [&](std::string t, int32_t type) {
    if (int64_t(tokens.size()) >= n) return;
    tokens.push_back(std::move(t));
    types.push_back(type);
  };
  add("[PAD]", 3);
  for (int i = 1; i < 100; ++i) add("[unused" + std::to_string(i - 1) + "]", 1);
  add("[UNK]", 3);
  add("[CLS]", 3);
  add("[SEP]", 3);
  add("[MASK]", 3);
  const std::string sp = "\xe2\x96\x81";  // U+2581: the converter's word-start mark
  for (int c = 33; c < 127; ++c) add(sp + std::string(1, char(c)), 1);
  for (int c = 33; c < 127; ++c)
    if (std::isalnum(c)) add(std::string(1, char(c)), 1);  // "##c" pieces
  // Then lower-case words of growing length, each as a word start and as a piece.
  for (int len = 2; int64_t(tokens.size()) < n; ++len) {
    std::string word(size_t(len), 'a');
    while (int64_t(tokens.size()) < n) {
      add(sp + word, 1);
      add(word, 1);
      int i = len - 1;
      while (i >= 0 && word[size_t(i)] == 'z') word[size_t(i--)] = 'a';
      if (i < 0) break;
      ++word[size_t(i)];
    }
  }
  w.set_u32("tokenizer.ggml.token_type_count", 2);
  w.set_str("tokenizer.ggml.model", "bert");
  w.set_str("tokenizer.ggml.pre", "default");
  w.set_str_array("tokenizer.ggml.tokens", tokens);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.unknown_token_id", 100);
  w.set_u32("tokenizer.ggml.seperator_token_id", 102);  // sic: llama.cpp's spelling
  w.set_u32("tokenizer.ggml.padding_token_id", 0);
  w.set_u32("tokenizer.ggml.cls_token_id", 101);
  w.set_u32("tokenizer.ggml.mask_token_id", 103);
}

int64_t copy_vocab(GGUFWriter& w, const GGUFFile& f) {
  for (const auto& [key, value] : f.kvs())
    if (key.rfind("tokenizer.", 0) == 0) w.set_value(key, value);
  const GGUFValue* t = f.find("tokenizer.ggml.tokens");
  if (!t || t->type != GGUFType::ARRAY || t->elem_type != GGUFType::STRING)
    throw Error(f.name() + ": no tokenizer.ggml.tokens string array to copy the vocabulary from");
  return int64_t(t->count);
}

std::vector<SynthTensor> plan_synth_tensors(const SynthPreset& p, FileType ft) {
  std::vector<SynthTensor> ts = synth_tensors(p);
  QuantModelInfo info;
  info.arch = p.arch;
  info.n_layer = p.n_layer;
  info.n_head = p.n_head;
  info.n_head_kv = p.n_head_kv;
  std::vector<TensorDesc> descs;
  for (const SynthTensor& t : ts) {
    TensorDesc d;
    d.name = t.name;
    d.n_dims = t.n_dims;
    std::copy(t.ne, t.ne + 4, d.ne);
    descs.push_back(d);
  }
  const std::vector<DType> types = plan_tensor_types(ft, info, descs);
  for (size_t i = 0; i < ts.size(); ++i) ts[i].type = ts[i].rope_freqs ? DType::F32 : types[i];
  for (SynthTensor& t : ts)  // the converter keeps these F32 (BERT)
    if (t.name == "position_embd.weight" || t.name == "token_types.weight") t.type = DType::F32;
  return ts;
}

SynthResult write_synth_model(const SynthPreset& p, const SynthOptions& o, const std::string& path) {
  std::vector<SynthTensor> ts;
  if (o.type_of) {
    ts = synth_tensors(p);
    for (SynthTensor& t : ts) t.type = t.rope_freqs ? DType::F32 : o.type_of(t);
  } else {
    ts = plan_synth_tensors(p, o.file_type);
  }
  for (const SynthTensor& t : ts) {
    if (!t.rope_freqs && !quant::can_randomize(t.type))
      throw Error("synth: tensor '" + t.name + "': cannot generate type " + dtype_name(t.type));
    if (t.ne[0] % traits(t.type).block_size != 0)
      throw Error("synth: tensor '" + t.name + "': rows of " + std::to_string(t.ne[0]) +
                  " do not fit type " + dtype_name(t.type));
  }

  if (o.vocab) check_not_input(o.vocab->name(), path);
  GGUFWriter w;
  write_synth_metadata(w, p, o.file_type);
  if (o.vocab) {
    const int64_t nv = copy_vocab(w, *o.vocab);
    if (nv != p.n_vocab)
      throw Error("synth: the vocabulary has " + std::to_string(nv) + " tokens but the model " +
                  std::to_string(p.n_vocab) + " rows");
  } else if (is_bert_preset(p)) {
    write_synthetic_wpm_vocab(w, p.n_vocab);
  } else {
    write_synthetic_vocab(w, p.n_vocab);
  }

  // Work list: pieces of at most kChunkBytes, whole blocks each.
  struct Job {
    size_t tensor;
    int64_t begin, n;  // elements
    size_t bytes;
    uint64_t seed;
  };
  std::vector<Job> jobs;
  SynthResult res;
  for (size_t i = 0; i < ts.size(); ++i) {
    const SynthTensor& t = ts[i];
    w.add_tensor(t.name, t.type, t.n_dims, t.ne);
    const DTypeTraits& tr = traits(t.type);
    const int64_t n = t.n_elements();
    const int64_t step = std::max<int64_t>(1, int64_t(kChunkBytes / tr.type_size)) * tr.block_size;
    for (int64_t b = 0, c = 0; b < n; b += step, ++c) {
      const int64_t k = std::min(step, n - b);
      jobs.push_back({i, b, k, row_bytes(t.type, k), quant::mix_seed(quant::mix_seed(o.seed, i), uint64_t(c))});
    }
    res.data_bytes += row_bytes(t.type, n);
    res.n_params += uint64_t(n);
  }
  res.n_tensors = ts.size();
  const std::vector<float> rope = p.rope_llama3_factor > 0 ? llama3_rope_factors(p) : std::vector<float>();

  w.open(path);

  // Generator threads fill a ring of buffers; this thread writes them in order.
  const size_t n_threads = size_t(std::max(1, o.threads));
  const size_t n_slots = 2 * n_threads;
  std::vector<std::vector<uint8_t>> bufs(n_slots);
  std::vector<int64_t> ready(n_slots, -1);  // job held by each slot, once generated
  std::atomic<size_t> next{0};
  size_t written = 0;
  bool failed = false;
  std::exception_ptr error;
  std::mutex mu;
  std::condition_variable cv;

  auto generate = [&](const Job& j, std::vector<uint8_t>& buf) {
    const SynthTensor& t = ts[j.tensor];
    buf.resize(j.bytes);
    if (t.rope_freqs)
      std::memcpy(buf.data(), rope.data() + j.begin, j.bytes);
    else
      quant::random_fill(t.type, buf.data(), j.n, t.mean, t.std, j.seed);
  };
  auto worker = [&]() {
    for (;;) {
      const size_t j = next.fetch_add(1);
      if (j >= jobs.size()) return;
      const size_t s = j % n_slots;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return failed || written + n_slots > j; });
        if (failed) return;
      }
      try {
        generate(jobs[j], bufs[s]);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu);
        if (!failed) error = std::current_exception();
        failed = true;
        cv.notify_all();
        return;
      }
      std::lock_guard<std::mutex> lk(mu);
      ready[s] = int64_t(j);
      cv.notify_all();
    }
  };
  auto stop = [&]() {
    {
      std::lock_guard<std::mutex> lk(mu);
      failed = true;
      next.store(jobs.size());
    }
    cv.notify_all();
  };
  ThreadGroup pool;  // all or none
  pool.start(int(n_threads), 0, [&](int) { worker(); }, stop);
  try {
    uint64_t done = 0;
    for (size_t j = 0; j < jobs.size(); ++j) {
      const size_t s = j % n_slots;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return failed || ready[s] == int64_t(j); });
        if (failed) std::rethrow_exception(error);
      }
      w.write_tensor_data(bufs[s].data(), jobs[j].bytes);
      done += jobs[j].bytes;
      {
        std::lock_guard<std::mutex> lk(mu);
        written = j + 1;
      }
      cv.notify_all();
      if (o.progress) o.progress(done, res.data_bytes);
    }
  } catch (...) {
    stop();
    pool.join();
    throw;
  }
  pool.join();
  w.close();
  if (o.sync) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::fsync(fd) != 0) {
      if (fd >= 0) ::close(fd);
      throw Error(path + ": cannot sync to disk: " + std::strerror(errno));
    }
    ::close(fd);
  }
  res.file_bytes = uint64_t(std::filesystem::file_size(path));
  return res;
}

}  // namespace weir
