// gpt-oss (OpenAI's open-weight MoE models, 20B and 120B), as llama.cpp runs
// it (its "gpt-oss" architecture; facts from llama.cpp's model and converter
// and the models' config.json):
//   x = token_embd[tokens]
//   per layer:  h = rms_norm(x) * attn_norm
//               q, k, v = Wq h + bq, Wk h + bk, Wv h + bv              GQA, head dim 64
//               q, k = rope(q), rope(k)     Neox, YaRN (below)
//               x += Wo attention(q, k, v; scale 1/sqrt(head_dim) * mscale^2,
//                                 the layer's sinks) + bo
//                    even layers see a sliding window of attention.sliding_window
//                    tokens, odd layers the whole context
//               h2 = rms_norm(x) * post_attention_norm
//               logits = Wr h2 + br;  ids = the expert_used_count largest;
//               w = softmax over the chosen logits
//               x += sum_j w_j (We_down swiglu_oai(We_gate h2 + bg_e, We_up h2 + bu_e) + bd_e)
//                    (swiglu_oai: graph.h, alpha 1.702, limit 7)
//   logits = output @ (rms_norm(x) * output_norm)
// YaRN (rope.scaling.type "yarn", factor s, original context n0, beta_fast
// 32, beta_slow 1 and attn_factor 1 unless the file says otherwise), as ggml's rope with
// ext_factor 1: pair i turns at theta_i = pos base^(-2i/n) ((1 - r_i) / s +
// r_i), r_i = 1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1) with lo, hi =
// floor / ceil of n log(n0 / (2 pi beta)) / (2 log base) for beta_fast and
// beta_slow (clamped to [0, n - 1]), and cos and sin are scaled by mscale =
// attn_factor (1 + 0.1 ln(s)). Here: rope's per-pair factors 1 / ((1 - r_i) / s + r_i),
// computed once, and mscale^2 on the attention scale (every dim is rotated).
#include <algorithm>
#include <climits>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/gguf.h"
#include "model/model.h"
#include "model/shard.h"
#include "model/transformer_blocks.h"

namespace weir {
namespace {

constexpr float kSwigluAlpha = 1.702f;  // llama.cpp's LLM_FFN_SWIGLU_OAI_MOE constants
constexpr float kSwigluLimit = 7.0f;

// ggml's rope_yarn_corr_dim: the pair index whose wavelength fits n_rot
// turns... in n_ctx_orig positions.
double yarn_corr_dim(int64_t n_dims, double n_ctx_orig, double n_rot, double base) {
  return double(n_dims) * std::log(n_ctx_orig / (n_rot * 2.0 * M_PI)) / (2.0 * std::log(base));
}

class GptOss final : public Model {
 public:
  explicit GptOss(GGUFFile f) : Model(std::move(f)) {
    const std::string p = hp_.arch + ".";
    if (hp_.n_expert == 0) throw Error(file_.name() + ": " + p + "expert_count is missing or 0; gpt-oss has experts");
    if (hp_.n_rot != hp_.head_dim_k)
      throw Error(file_.name() + ": partial rope (rope.dimension_count " + std::to_string(hp_.n_rot) +
                  " < head size " + std::to_string(hp_.head_dim_k) + ") is not supported for gpt-oss");
    for (int64_t il = 0; il < hp_.n_layer; ++il) hp_.is_swa[size_t(il)] = hp_.n_swa > 0 && il % 2 == 0;
    read_yarn(p);
    const int64_t E = hp_.n_embd, V = hp_.n_vocab, NE = hp_.n_expert, FE = hp_.n_ff_exp;
    const int64_t Dk = hp_.head_dim_k, Dv = hp_.head_dim_v;
    const int64_t Nq = Dk * hp_.n_head, Nk = Dk * hp_.n_head_kv, Nv = Dv * hp_.n_head_kv;
    tok_embd_ = &weight("token_embd.weight", {E, V});
    output_norm_ = &vector_f32("output_norm.weight", E);
    output_ = weight_opt("output.weight", {E, V});
    if (!output_) output_ = tok_embd_;
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
      const std::string b = "blk." + std::to_string(il) + ".";
      Layer L;
      L.attn_norm = &vector_f32(b + "attn_norm.weight", E);
      L.wq = &weight(b + "attn_q.weight", {E, Nq});
      L.bq = &vector_f32(b + "attn_q.bias", Nq);
      L.wk = &weight(b + "attn_k.weight", {E, Nk});
      L.bk = &vector_f32(b + "attn_k.bias", Nk);
      L.wv = &weight(b + "attn_v.weight", {E, Nv});
      L.bv = &vector_f32(b + "attn_v.bias", Nv);
      L.wo = &weight(b + "attn_output.weight", {Dv * hp_.n_head, E});
      L.bo = &vector_f32(b + "attn_output.bias", E);
      L.sinks = &vector_f32(b + "attn_sinks.weight", hp_.n_head);
      L.ffn_norm = &vector_f32(b + "post_attention_norm.weight", E);
      L.router = &weight(b + "ffn_gate_inp.weight", {E, NE});
      L.router_b = &vector_f32(b + "ffn_gate_inp.bias", NE);
      L.gate = &weight(b + "ffn_gate_exps.weight", {E, FE, NE});
      L.gate_b = &matrix_f32(b + "ffn_gate_exps.bias", FE, NE);
      L.up = &weight(b + "ffn_up_exps.weight", {E, FE, NE});
      L.up_b = &matrix_f32(b + "ffn_up_exps.bias", FE, NE);
      L.down = &weight(b + "ffn_down_exps.weight", {FE, E, NE});
      L.down_b = &matrix_f32(b + "ffn_down_exps.bias", E, NE);
      layers_.push_back(L);
    }
  }

  ForwardGraph build(int64_t T, int64_t n_kv, int64_t n_out, KVCache& kv, bool separate_tokens,
                     const TensorParallel& tp, ForwardOutput out) const override {
    const HParams& h = hp_;
    const int64_t Dk = h.head_dim_k, Dv = h.head_dim_v;
    const HeadShard hs = shard_heads(h, tp);  // this rank's share (all of it without tensor parallelism)
    const int64_t Hq = hs.nq, Hkv = hs.nkv;
    if (tp.size > 1) throw Error("tensor parallel (--tp) of mixture-of-experts models is not supported yet");
    ForwardGraph fg = begin_forward(T, n_kv, n_out, h.n_swa > 0, separate_tokens);
    Graph& g = *fg.graph;
    auto norm = [&](Tensor* x, const GGUFTensorInfo* w) { return g.mul(g.rms_norm(x, h.rms_eps), leaf(g, *w)); };
    auto linear = [&](const GGUFTensorInfo* w, const GGUFTensorInfo* b, Tensor* x) {
      return g.add(g.mul_mat(leaf(g, *w), x), leaf(g, *b));
    };
    RopeParams rope{int(h.n_rot), h.rope_base, yarn_factors_.empty() ? h.rope_freq_scale : 1.0f, RopeMode::Neox,
                    nullptr};
    if (!yarn_factors_.empty())
      rope.freq_factors = g.external(DType::F32, {int64_t(yarn_factors_.size())},
                                     const_cast<float*>(yarn_factors_.data()), "rope_yarn_factors");
    const float scale = h.attn_scale * mscale_ * mscale_;

    Tensor* x = g.get_rows(leaf(g, *tok_embd_), fg.tokens);  // [E, T]
    for (int64_t il = 0; il < h.n_layer; ++il) {
      const Layer& L = layers_[size_t(il)];
      const bool swa = h.is_swa[size_t(il)];
      Tensor* cur = norm(x, L.attn_norm);
      Tensor* q = g.mul_mat(leaf(g, *L.wq), cur);
      Tensor* k = g.mul_mat(leaf(g, *L.wk), cur);
      Tensor* v = g.mul_mat(leaf(g, *L.wv), cur);  // [Dv*Hkv, T]
      q = g.reshape(g.add(q, leaf(g, *L.bq)), {Dk, Hq, T});
      k = g.reshape(g.add(k, leaf(g, *L.bk)), {Dk, Hkv, T});
      v = g.add(v, leaf(g, *L.bv));
      q = g.rope(q, fg.pos, rope);
      k = g.rope(k, fg.pos, rope);
      AttentionExtras extras;
      extras.sinks = leaf(g, *L.sinks);
      cur = cached_attention(g, fg, kv, int(il), q, k, v, swa ? fg.mask_swa : fg.mask, scale,
                             swa ? int32_t(std::min<int64_t>(h.n_swa, INT32_MAX)) : 0, extras);
      cur = linear(L.wo, L.bo, cur);  // [E, T]
      if (il == h.n_layer - 1) {  // only the rows whose logits are wanted go on
        cur = g.get_rows(cur, fg.out_rows);
        x = g.get_rows(x, fg.out_rows);
      }
      x = g.add(cur, x);
      x = g.add(expert_ffn(g, L, norm(x, L.ffn_norm)), x);
    }
    x = norm(x, output_norm_);  // [E, n_out]
    if (out == ForwardOutput::Hidden) {
      fg.hidden = x;
      g.mark_output(fg.hidden);
      return fg;
    }
    fg.logits = g.mul_mat(leaf(g, *output_), x);  // [V, n_out]
    g.mark_output(fg.logits);
    return fg;
  }

 private:
  struct Layer {
    const GGUFTensorInfo *attn_norm, *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo, *sinks, *ffn_norm;
    const GGUFTensorInfo *router, *router_b, *gate, *gate_b, *up, *up_b, *down, *down_b;
  };

  // An F32 matrix [n0, n1] (the experts' biases, a row per expert).
  const GGUFTensorInfo& matrix_f32(const std::string& name, int64_t n0, int64_t n1) const {
    const GGUFTensorInfo& t = weight(name, {n0, n1});
    if (t.dtype != DType::F32) throw Error(file_.name() + ": " + name + " must be F32, not " + dtype_name(t.dtype));
    return t;
  }

  // The MoE FFN of h [E, T]: [E, T]. Each chosen expert's bias row is
  // gathered by its id and added to that expert's product.
  Tensor* expert_ffn(Graph& g, const Layer& L, Tensor* h) const {
    const int64_t E = hp_.n_embd, FE = hp_.n_ff_exp, T = h->ne[1], K = hp_.n_expert_used;
    Tensor* logits = g.add(g.mul_mat(leaf(g, *L.router), h), leaf(g, *L.router_b));  // [n_expert, T]
    Tensor* ids = g.top_k(logits, int(K));                                             // [K, T]
    Tensor* w = g.moe_weights(logits, ids, true);  // softmax over all, renormalized over the chosen
    Tensor* flat_ids = g.reshape(ids, {K * T});
    auto bias = [&](const GGUFTensorInfo* b, int64_t n) {
      return g.reshape(g.get_rows(leaf(g, *b), flat_ids), {n, K, T});
    };
    Tensor* x = g.reshape(h, {E, 1, T});
    Tensor* gate = g.add(g.mul_mat_id(leaf(g, *L.gate), x, ids), bias(L.gate_b, FE));  // [FE, K, T]
    Tensor* up = g.add(g.mul_mat_id(leaf(g, *L.up), x, ids), bias(L.up_b, FE));
    Tensor* par = g.swiglu_oai(gate, up, kSwigluAlpha, kSwigluLimit);
    Tensor* y = g.add(g.mul_mat_id(leaf(g, *L.down), par, ids), bias(L.down_b, E));  // [E, K, T]
    return g.moe_sum(y, w);                                                           // [E, T]
  }

  // YaRN's per-pair factors and mscale (file comment), or none.
  void read_yarn(const std::string& p) {
    const std::string type = std::string(file_.get_str_or(p + "rope.scaling.type", "none"));
    if (type != "yarn") return;  // none or linear: HParams' freq scale
    const double s = 1.0 / double(hp_.rope_freq_scale);
    const double n0 = double(file_.get_uint_or(p + "rope.scaling.original_context_length", uint64_t(hp_.n_ctx_train)));
    const double beta_fast = file_.get_float_or(p + "rope.scaling.yarn_beta_fast", 32.0);
    const double beta_slow = file_.get_float_or(p + "rope.scaling.yarn_beta_slow", 1.0);
    const double attn_factor = file_.get_float_or(p + "rope.scaling.yarn_attn_factor", 1.0);
    if (!(s >= 1.0) || !(n0 > 0) || !(beta_fast > 0) || !(beta_slow > 0) || !(attn_factor > 0))
      throw Error(file_.name() + ": YaRN rope scaling needs a factor >= 1, an original context and positive betas");
    const int64_t n = hp_.n_rot;
    const double base = double(hp_.rope_base);
    const double lo = std::max(0.0, std::floor(yarn_corr_dim(n, n0, beta_fast, base)));
    const double hi = std::min(double(n - 1), std::ceil(yarn_corr_dim(n, n0, beta_slow, base)));
    yarn_factors_.resize(size_t(n / 2));
    for (int64_t i = 0; i < n / 2; ++i) {
      const double y = (double(i) - lo) / std::max(0.001, hi - lo);
      const double r = 1.0 - std::min(1.0, std::max(0.0, y));
      yarn_factors_[size_t(i)] = float(1.0 / ((1.0 - r) / s + r));
    }
    mscale_ = float(attn_factor * (1.0 + 0.1 * std::log(s)));
  }

  const GGUFTensorInfo* tok_embd_ = nullptr;
  const GGUFTensorInfo* output_norm_ = nullptr;
  const GGUFTensorInfo* output_ = nullptr;
  std::vector<Layer> layers_;
  std::vector<float> yarn_factors_;  // YaRN: rope's per-pair factors (empty: none)
  float mscale_ = 1.0f;              // YaRN's magnitude scale of q and k
};

}  // namespace

std::unique_ptr<Model> make_gpt_oss(GGUFFile f) { return std::make_unique<GptOss>(std::move(f)); }

}  // namespace weir
