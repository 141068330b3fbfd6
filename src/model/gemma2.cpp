// Gemma 2, as llama.cpp runs it: embeddings scaled by sqrt(n_embd); pre- and
// post-norms around attention and FFN (RMS norm weights used as GGUF stores
// them); NEOX rope with rope.freq_base on every layer; q scaled by
// 1/sqrt(head_dim), or 1/sqrt(n_embd / n_head) for the 27B (46 layers: HF's
// query_pre_attn_scalar, which GGUF does not carry); attention scores
// soft-capped, s = cap * tanh(s / cap) before the mask, cap
// gemma2.attn_logit_softcapping (50); GELU(tanh)-gated FFN; even layers
// (0, 2, ...) see a window of attention.sliding_window tokens (4096 when the
// key is absent), odd ones every token; logits soft-capped by
// gemma2.final_logit_softcapping (30); output matrix tied to the token
// embeddings unless present.
#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

#include "core/error.h"
#include "model/model.h"
#include "model/shard.h"
#include "model/transformer_blocks.h"

namespace weir {
namespace {

class Gemma2 final : public Model {
 public:
  explicit Gemma2(GGUFFile f) : Model(std::move(f)) {
    const int64_t E = hp_.n_embd, V = hp_.n_vocab;
    const std::string p = hp_.arch + ".";
    if (!file_.find(p + "attention.sliding_window")) hp_.n_swa = 4096;  // Gemma 2's, as llama.cpp assumes
    for (int64_t il = 0; il < hp_.n_layer; ++il) hp_.is_swa[size_t(il)] = hp_.n_swa > 0 && il % 2 == 0;
    hp_.embd_scale = std::sqrt(float(E));
    hp_.attn_scale = hp_.n_layer == 46 ? 1.0f / std::sqrt(float(E / hp_.n_head))  // 27B
                                       : 1.0f / std::sqrt(float(hp_.head_dim_k));
    attn_softcap_ = softcap_key(p + "attn_logit_softcapping", 50.0);
    final_softcap_ = softcap_key(p + "final_logit_softcapping", 30.0);
    const int64_t Dk = hp_.head_dim_k, Dv = hp_.head_dim_v, F = hp_.n_ff;
    tok_embd_ = &weight("token_embd.weight", {E, V});
    output_norm_ = &vector_f32("output_norm.weight", E);
    output_ = weight_opt("output.weight", {E, V});
    if (!output_) output_ = tok_embd_;
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
      const std::string b = "blk." + std::to_string(il) + ".";
      Layer L;
      L.attn_norm = &vector_f32(b + "attn_norm.weight", E);
      L.wq = &weight(b + "attn_q.weight", {E, Dk * hp_.n_head});
      L.wk = &weight(b + "attn_k.weight", {E, Dk * hp_.n_head_kv});
      L.wv = &weight(b + "attn_v.weight", {E, Dv * hp_.n_head_kv});
      L.wo = &weight(b + "attn_output.weight", {Dv * hp_.n_head, E});
      L.post_attn_norm = &vector_f32(b + "post_attention_norm.weight", E);
      L.ffn_norm = &vector_f32(b + "ffn_norm.weight", E);
      L.gate = &weight(b + "ffn_gate.weight", {E, F});
      L.up = &weight(b + "ffn_up.weight", {E, F});
      L.down = &weight(b + "ffn_down.weight", {F, E});
      L.post_ffn_norm = &vector_f32(b + "post_ffw_norm.weight", E);
      layers_.push_back(L);
    }
  }

  ForwardGraph build(int64_t T, int64_t n_kv, int64_t n_out, KVCache& kv, bool separate_tokens,
                     const TensorParallel& tp, ForwardOutput out) const override {
    const HParams& h = hp_;
    const int64_t Dk = h.head_dim_k, Dv = h.head_dim_v;
    const HeadShard hs = shard_heads(h, tp);  // this rank's share (all of it without tensor parallelism)
    const int64_t Hq = hs.nq, Hkv = hs.nkv;
    const bool split = tp.size > 1;
    ForwardGraph fg = begin_forward(T, n_kv, n_out, h.n_swa > 0, separate_tokens);
    Graph& g = *fg.graph;

    auto norm = [&](Tensor* x, const GGUFTensorInfo* w) { return g.mul(g.rms_norm(x, h.rms_eps), leaf(g, *w)); };

    Tensor* x = g.scale(g.get_rows(leaf(g, *tok_embd_), fg.tokens), h.embd_scale);  // [E, T]
    for (int64_t il = 0; il < h.n_layer; ++il) {
      const Layer& L = layers_[size_t(il)];
      const bool swa = h.is_swa[size_t(il)];
      const Range ff = shard_ffn(h.n_ff, L.down->dtype, tp);

      Tensor* cur = norm(x, L.attn_norm);
      Tensor* q = g.reshape(g.mul_mat(leaf_rows(g, *L.wq, hs.q0 * Dk, (hs.q0 + Hq) * Dk), cur), {Dk, Hq, T});
      Tensor* k = g.reshape(g.mul_mat(leaf_rows(g, *L.wk, hs.kv0 * Dk, (hs.kv0 + Hkv) * Dk), cur), {Dk, Hkv, T});
      Tensor* v = g.mul_mat(leaf_rows(g, *L.wv, hs.kv0 * Dv, (hs.kv0 + Hkv) * Dv), cur);  // [Dv*Hkv, T]
      q = g.rope_neox(q, fg.pos, int(h.n_rot), h.rope_base, h.rope_freq_scale);
      k = g.rope_neox(k, fg.pos, int(h.n_rot), h.rope_base, h.rope_freq_scale);
      q = g.scale(q, h.attn_scale);

      cur = cached_attention(g, fg, kv, int(il), q, k, v, swa ? fg.mask_swa : fg.mask, 1.0f,
                             swa ? int32_t(std::min<int64_t>(h.n_swa, INT32_MAX)) : 0,
                             AttentionExtras{.sinks = nullptr, .softcap = attn_softcap_});
      // Wo cur: this rank's part (row_parallel_product), then every rank's: [E, T]
      cur = row_parallel_product(g, *L.wo, cur, {hs.q0 * Dv, (hs.q0 + Hq) * Dv}, tp);

      if (il == h.n_layer - 1) {  // only the rows whose logits are wanted go on
        cur = g.get_rows(cur, fg.out_rows);
        x = g.get_rows(x, fg.out_rows);
      }
      Tensor* sa = g.add(norm(row_parallel_join(g, cur, h.n_embd, tp), L.post_attn_norm), x);
      cur = norm(sa, L.ffn_norm);
      cur = g.gelu_mul(g.mul_mat(leaf_rows(g, *L.gate, ff.begin, ff.end), cur),
                       g.mul_mat(leaf_rows(g, *L.up, ff.begin, ff.end), cur));  // [F, T]
      cur = row_parallel_join(g, row_parallel_product(g, *L.down, cur, ff, tp), h.n_embd, tp);
      x = g.add(norm(cur, L.post_ffn_norm), sa);
    }
    x = norm(x, output_norm_);  // [E, n_out]
    if (out == ForwardOutput::Hidden) {
      fg.hidden = x;
      g.mark_output(fg.hidden);
      return fg;
    }
    if (split) {  // this rank's vocab rows, then every rank's
      const Range vr = split_range(h.n_vocab, tp.size, tp.rank);
      fg.logits = g.all_gather(g.mul_mat(leaf_rows(g, *output_, vr.begin, vr.end), x), h.n_vocab, tp.comm);
    } else {
      fg.logits = g.mul_mat(leaf(g, *output_), x);  // [V, n_out]
    }
    fg.logits = g.softcap(fg.logits, final_softcap_);
    g.mark_output(fg.logits);
    return fg;
  }

 private:
  // A soft-capping key: d when absent, else a positive finite number.
  float softcap_key(const std::string& key, double d) const {
    const double v = file_.get_float_or(key, d);
    if (!std::isfinite(v) || v <= 0)
      throw Error(file_.name() + ": " + key + " is " + std::to_string(v) + "; it must be a positive finite number");
    return float(v);
  }

  struct Layer {
    const GGUFTensorInfo *attn_norm, *wq, *wk, *wv, *wo, *post_attn_norm;
    const GGUFTensorInfo *ffn_norm, *gate, *up, *down, *post_ffn_norm;
  };
  float attn_softcap_ = 50.0f, final_softcap_ = 30.0f;
  const GGUFTensorInfo* tok_embd_ = nullptr;
  const GGUFTensorInfo* output_norm_ = nullptr;
  const GGUFTensorInfo* output_ = nullptr;
  std::vector<Layer> layers_;
};

}  // namespace

std::unique_ptr<Model> make_gemma2(GGUFFile f) { return std::make_unique<Gemma2>(std::move(f)); }

}  // namespace weir
