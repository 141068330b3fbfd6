#include "model/hparams.h"

#include <cmath>

#include "core/error.h"
#include "core/gguf.h"
#include "core/warn.h"

namespace weir {

HParams HParams::from_gguf(const GGUFFile& f) {
  HParams h;
  h.arch = std::string(f.get_str("general.architecture"));
  const std::string p = h.arch + ".";
  auto u = [&](const char* k) { return int64_t(f.get_uint(p + k)); };
  auto u_or = [&](const char* k, int64_t d) { return int64_t(f.get_uint_or(p + k, uint64_t(d))); };
  auto positive = [&](const char* k) {
    const int64_t v = u(k);
    if (v <= 0) throw Error(f.name() + ": " + p + k + " is " + std::to_string(v) + "; it must be positive");
    return v;
  };
  // A float key that must be finite and positive when present.
  auto positive_float_or = [&](const std::string& k, double d) {
    const double v = f.get_float_or(k, d);
    if (!std::isfinite(v) || v <= 0)
      throw Error(f.name() + ": " + k + " is " + std::to_string(v) + "; it must be a positive finite number");
    return v;
  };
  h.n_ctx_train = u_or("context_length", 0);
  if (h.n_ctx_train == 0 && f.find(p + "context_length"))
    warn(f.name() + ": " + p + "context_length is 0; the context the model was trained for is unknown");
  h.n_embd = positive("embedding_length");
  h.n_layer = positive("block_count");
  h.n_ff = u("feed_forward_length");
  h.n_head = u("attention.head_count");
  h.n_head_kv = u_or("attention.head_count_kv", h.n_head);
  if (h.n_head <= 0 || h.n_head_kv <= 0 || h.n_head % h.n_head_kv != 0)
    throw Error(f.name() + ": " + p + "attention.head_count (" + std::to_string(h.n_head) +
                ") must be a positive multiple of head_count_kv (" + std::to_string(h.n_head_kv) + ")");
  h.head_dim_k = u_or("attention.key_length", h.n_embd / h.n_head);
  h.head_dim_v = u_or("attention.value_length", h.head_dim_k);
  if (h.head_dim_k <= 0 || h.head_dim_v <= 0)
    throw Error(f.name() + ": " + p + "attention.key_length / value_length (" + std::to_string(h.head_dim_k) + ", " +
                std::to_string(h.head_dim_v) + ") must be positive");
  h.rms_eps = float(positive_float_or(p + "attention.layer_norm_rms_epsilon", 1e-5));
  h.n_rot = u_or("rope.dimension_count", h.head_dim_k);
  if (h.n_rot <= 0 || h.n_rot % 2 || h.n_rot > h.head_dim_k)
    throw Error(f.name() + ": " + p + "rope.dimension_count (" + std::to_string(h.n_rot) +
                ") must be even and at most the head size (" + std::to_string(h.head_dim_k) + ")");
  h.rope_base = float(positive_float_or(p + "rope.freq_base", 10000.0));
  // As llama.cpp: the factor (or the older rope.scale_linear) scales
  // positions by 1/factor. Llama 3 style scaling has no metadata type:
  // converters store its per-pair factors as the tensor rope_freqs.weight.
  const std::string scaling = std::string(f.get_str_or(p + "rope.scaling.type", "none"));
  // YaRN: only gpt-oss's builder computes it (model/gpt_oss.cpp); the
  // factor still sets the frequency scale.
  if (scaling != "none" && scaling != "linear" && !(scaling == "yarn" && h.arch == "gpt-oss"))
    throw Error(f.name() + ": " + p + "rope.scaling.type '" + scaling + "' is not supported yet" +
                (scaling == "yarn" ? " for " + h.arch + " (only for gpt-oss)" : ""));
  const std::string factor_key =
      f.find(p + "rope.scaling.factor") ? p + "rope.scaling.factor" : p + "rope.scale_linear";
  const double factor = f.get_float_or(factor_key, 0.0);
  if (factor < 0 || !std::isfinite(factor))
    throw Error(f.name() + ": " + factor_key + " (" + std::to_string(factor) + ") must be positive");
  if (factor > 0) h.rope_freq_scale = float(1.0 / factor);
  h.rope_base_swa = h.rope_base;
  h.rope_freq_scale_swa = h.rope_freq_scale;
  h.n_swa = u_or("attention.sliding_window", 0);
  h.is_swa.assign(size_t(h.n_layer), false);
  h.attn_scale = 1.0f / std::sqrt(float(h.head_dim_k));
  h.n_expert = u_or("expert_count", 0);
  if (h.n_expert > 0) {
    h.n_expert_used = u("expert_used_count");
    if (h.n_expert_used < 1 || h.n_expert_used > h.n_expert)
      throw Error(f.name() + ": " + p + "expert_used_count (" + std::to_string(h.n_expert_used) +
                  ") must be 1 to expert_count (" + std::to_string(h.n_expert) + ")");
    h.n_ff_exp = u_or("expert_feed_forward_length", h.n_ff);
  }
  return h;
}

}  // namespace weir
