// Gemma 3, as llama.cpp runs it: embeddings scaled by sqrt(n_embd); pre- and
// post-norms around attention and FFN (RMS norm weights used as GGUF stores
// them); per-head q/k RMS norms; NEOX rope with base 10k on sliding-window
// layers and rope.freq_base on global ones; q scaled by 1/sqrt(head_dim);
// GELU(tanh)-gated FFN; every 6th layer global, the others see a window of
// n_swa tokens; output matrix tied to the token embeddings unless present.
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

class Gemma3 final : public Model {
 public:
  explicit Gemma3(GGUFFile f) : Model(std::move(f)) {
    const int64_t E = hp_.n_embd, V = hp_.n_vocab;
    if (hp_.n_swa > 0) {
      for (int64_t il = 0; il < hp_.n_layer; ++il) hp_.is_swa[size_t(il)] = (il + 1) % 6 != 0;
      hp_.rope_base_swa = 10000.0f;
      hp_.rope_freq_scale_swa = 1.0f;
    }
    hp_.embd_scale = std::sqrt(float(E));
    hp_.attn_scale = hp_.n_layer == 62 ? 1.0f / std::sqrt(float(E / hp_.n_head))  // 27B
                                       : 1.0f / std::sqrt(float(hp_.head_dim_k));
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
      L.q_norm = &vector_f32(b + "attn_q_norm.weight", Dk);
      L.k_norm = &vector_f32(b + "attn_k_norm.weight", Dk);
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
      const float base = swa ? h.rope_base_swa : h.rope_base;
      const float fscale = swa ? h.rope_freq_scale_swa : h.rope_freq_scale;
      const Range ff = shard_ffn(h.n_ff, L.down->dtype, tp);

      Tensor* cur = norm(x, L.attn_norm);
      Tensor* q = g.reshape(g.mul_mat(leaf_rows(g, *L.wq, hs.q0 * Dk, (hs.q0 + Hq) * Dk), cur), {Dk, Hq, T});
      Tensor* k = g.reshape(g.mul_mat(leaf_rows(g, *L.wk, hs.kv0 * Dk, (hs.kv0 + Hkv) * Dk), cur), {Dk, Hkv, T});
      Tensor* v = g.mul_mat(leaf_rows(g, *L.wv, hs.kv0 * Dv, (hs.kv0 + Hkv) * Dv), cur);  // [Dv*Hkv, T]
      // Both norms, then both ropes: the GPU runs the norms, the ropes, q's
      // scale and the cache writes as one launch (their order in the graph
      // makes them neighbours; the results are the same in any order).
      q = norm(q, L.q_norm);
      k = norm(k, L.k_norm);
      q = g.rope_neox(q, fg.pos, int(Dk), base, fscale);
      k = g.rope_neox(k, fg.pos, int(Dk), base, fscale);
      q = g.scale(q, h.attn_scale);

      cur = cached_attention(g, fg, kv, int(il), q, k, v, swa ? fg.mask_swa : fg.mask, 1.0f,
                             swa ? int32_t(std::min<int64_t>(h.n_swa, INT32_MAX)) : 0);
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
    g.mark_output(fg.logits);
    return fg;
  }

 private:
  struct Layer {
    const GGUFTensorInfo *attn_norm, *wq, *wk, *wv, *q_norm, *k_norm, *wo, *post_attn_norm;
    const GGUFTensorInfo *ffn_norm, *gate, *up, *down, *post_ffn_norm;
  };
  const GGUFTensorInfo* tok_embd_ = nullptr;
  const GGUFTensorInfo* output_norm_ = nullptr;
  const GGUFTensorInfo* output_ = nullptr;
  std::vector<Layer> layers_;
};

}  // namespace

std::unique_ptr<Model> make_gemma3(GGUFFile f) { return std::make_unique<Gemma3>(std::move(f)); }

}  // namespace weir
