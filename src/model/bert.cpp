// BERT encoders for embeddings, as llama.cpp runs them (its llm_build_bert):
// "bert" (bge, all-MiniLM ...) and "nomic-bert" (nomic-embed-text).
//
//   x = token_embd[tokens] + token_types[0] (+ position_embd[pos]: bert)
//   x = LayerNorm(x) * token_embd_norm.weight + .bias
//   per layer (post-norm):
//     q, k, v = Wq x + bq, Wk x + bk, Wv x + bv     (bert; nomic: one attn_qkv, no biases,
//                                                    then NEOX rope on q and k)
//     a = Wo attention(q, k, v) + bo                 (every token sees every token of its sequence)
//     x = LayerNorm(a + x) * attn_output_norm      (+ its bias)
//     f = down(gelu(up x + b_up)) + b_down         (bert; nomic: down(silu(gate x) * up x))
//     x = LayerNorm(f + x) * layer_output_norm     (+ its bias)
// The last layer's x is the hidden state pooled into an embedding (there is
// no LM head: a graph for logits is refused). Token types are all "sentence
// A" (row 0), as llama.cpp's. Attention is non-causal (HParams::causal), so
// a sequence is encoded in one step; bert's positions end at its position
// table (HParams::n_pos_max).
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/model.h"
#include "model/transformer_blocks.h"

namespace weir {
namespace {

class Bert final : public Model {
 public:
  explicit Bert(GGUFFile f) : Model(std::move(f)) {
    nomic_ = hp_.arch == "nomic-bert";
    const std::string p = hp_.arch + ".";
    hp_.embeddings_only = true;
    hp_.causal = file_.get_bool_or(p + "attention.causal", false);
    if (hp_.causal) throw Error(file_.name() + ": " + p + "attention.causal is true; weir runs BERT encoders non-causal only");
    eps_ = float(file_.get_float_or(p + "attention.layer_norm_epsilon", 1e-12));
    if (hp_.n_head_kv != hp_.n_head)
      throw Error(file_.name() + ": " + p + "attention.head_count_kv must equal head_count in a BERT model");
    const int64_t E = hp_.n_embd, V = hp_.n_vocab, F = hp_.n_ff, D = hp_.head_dim_k;
    if (hp_.head_dim_v != D || D * hp_.n_head != E)
      throw Error(file_.name() + ": a BERT model's heads must split " + p + "embedding_length evenly");
    tok_embd_ = &weight("token_embd.weight", {E, V});
    // Any number of token types (bge: 2); row 0 is added. llama.cpp's
    // converter keeps it F32 (then a leaf on the mmap); another type is
    // widened here once.
    type_embd_ = file_.find_tensor("token_types.weight");
    if (type_embd_) {
      if (type_embd_->ne[0] != E || type_embd_->n_dims != 2 || !traits(type_embd_->dtype).dequantizable)
        throw Error(file_.name() + ": token_types.weight must be rows of " + std::to_string(E));
      if (type_embd_->dtype != DType::F32) {
        type_row_.resize(size_t(E));
        dequantize_row(type_embd_->dtype, type_embd_->data, type_row_.data(), E);
      }
    }
    if (!nomic_) {
      const GGUFTensorInfo* pe = file_.find_tensor("position_embd.weight");
      if (!pe) throw Error(file_.name() + ": required tensor 'position_embd.weight' is missing");
      pos_embd_ = &weight("position_embd.weight", {E, pe->ne[1]});
      hp_.n_pos_max = pe->ne[1];
    }
    tok_norm_ = {&vector_f32("token_embd_norm.weight", E), &vector_f32("token_embd_norm.bias", E)};
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
      const std::string b = "blk." + std::to_string(il) + ".";
      Layer L;
      if (nomic_) {
        L.wqkv = &weight(b + "attn_qkv.weight", {E, 3 * E});
        L.gate = &weight(b + "ffn_gate.weight", {E, F});
      } else {
        L.wq = &weight(b + "attn_q.weight", {E, E});
        L.wk = &weight(b + "attn_k.weight", {E, E});
        L.wv = &weight(b + "attn_v.weight", {E, E});
        L.bq = &vector_f32(b + "attn_q.bias", E);
        L.bk = &vector_f32(b + "attn_k.bias", E);
        L.bv = &vector_f32(b + "attn_v.bias", E);
        L.bo = &vector_f32(b + "attn_output.bias", E);
        L.b_up = &vector_f32(b + "ffn_up.bias", F);
        L.b_down = &vector_f32(b + "ffn_down.bias", E);
      }
      L.wo = &weight(b + "attn_output.weight", {E, E});
      L.attn_out_norm = {&vector_f32(b + "attn_output_norm.weight", E), &vector_f32(b + "attn_output_norm.bias", E)};
      L.up = &weight(b + "ffn_up.weight", {E, F});
      L.down = &weight(b + "ffn_down.weight", {F, E});
      L.layer_out_norm = {&vector_f32(b + "layer_output_norm.weight", E),
                          &vector_f32(b + "layer_output_norm.bias", E)};
      layers_.push_back(L);
    }
  }

  ForwardGraph build(int64_t T, int64_t n_kv, int64_t n_out, KVCache& kv, bool separate_tokens,
                     const TensorParallel& tp, ForwardOutput out) const override {
    if (out != ForwardOutput::Hidden)
      throw Error(file_.name() + ": this model only makes embeddings (" + hp_.arch + " has no language model head)");
    if (tp.size > 1) throw Error(hp_.arch + ": tensor parallelism is not supported for BERT models");
    const HParams& h = hp_;
    const int64_t E = h.n_embd, H = h.n_head, D = h.head_dim_k;
    ForwardGraph fg = begin_forward(T, n_kv, n_out, false, separate_tokens);
    Graph& g = *fg.graph;
    auto norm = [&](Tensor* x, const Norm& n) {  // LayerNorm with weight and bias
      return g.add(g.mul(g.layer_norm(x, eps_), leaf(g, *n.w)), leaf(g, *n.b));
    };
    auto linear = [&](const GGUFTensorInfo* w, const GGUFTensorInfo* b, Tensor* x) {
      Tensor* y = g.mul_mat(leaf(g, *w), x);
      return b ? g.add(y, leaf(g, *b)) : y;
    };

    Tensor* x = g.get_rows(leaf(g, *tok_embd_), fg.tokens);  // [E, T]
    if (!type_row_.empty())
      x = g.add(x, g.external(DType::F32, {E}, const_cast<float*>(type_row_.data()), "token_types.weight row 0"));
    else if (type_embd_)
      x = g.add(x, leaf_rows(g, *type_embd_, 0, 1));
    if (pos_embd_) x = g.add(g.get_rows(leaf(g, *pos_embd_), fg.pos), x);
    x = norm(x, tok_norm_);
    for (int64_t il = 0; il < h.n_layer; ++il) {
      const Layer& L = layers_[size_t(il)];
      Tensor *q, *k, *v;
      if (nomic_) {  // attn_qkv's q, k and v rows, each a leaf on its row block (as phi3)
        q = g.reshape(g.mul_mat(leaf_rows(g, *L.wqkv, 0, E), x), {D, H, T});
        k = g.reshape(g.mul_mat(leaf_rows(g, *L.wqkv, E, 2 * E), x), {D, H, T});
        v = g.mul_mat(leaf_rows(g, *L.wqkv, 2 * E, 3 * E), x);  // [E, T]
        q = g.rope_neox(q, fg.pos, int(h.n_rot), h.rope_base, h.rope_freq_scale);
        k = g.rope_neox(k, fg.pos, int(h.n_rot), h.rope_base, h.rope_freq_scale);
      } else {
        q = g.reshape(linear(L.wq, L.bq, x), {D, H, T});
        k = g.reshape(linear(L.wk, L.bk, x), {D, H, T});
        v = linear(L.wv, L.bv, x);  // [E, T]
      }
      Tensor* cur = cached_attention(g, fg, kv, int(il), q, k, v, fg.mask, 1.0f / std::sqrt(float(D)));
      cur = linear(L.wo, L.bo, cur);  // [E, T]
      if (il == h.n_layer - 1) {  // only the rows the pooling reads go on
        cur = g.get_rows(cur, fg.out_rows);
        x = g.get_rows(x, fg.out_rows);
      }
      x = norm(g.add(cur, x), L.attn_out_norm);
      Tensor* f = nomic_ ? g.silu_mul(g.mul_mat(leaf(g, *L.gate), x), g.mul_mat(leaf(g, *L.up), x))  // [F, T]
                         : g.gelu(linear(L.up, L.b_up, x));
      f = linear(L.down, L.b_down, f);  // [E, T]
      x = norm(g.add(f, x), L.layer_out_norm);
    }
    fg.hidden = x;  // [E, n_out]
    g.mark_output(fg.hidden);
    return fg;
  }

 private:
  struct Norm {
    const GGUFTensorInfo *w = nullptr, *b = nullptr;
  };
  struct Layer {
    const GGUFTensorInfo *wq = nullptr, *wk = nullptr, *wv = nullptr, *wqkv = nullptr;
    const GGUFTensorInfo *bq = nullptr, *bk = nullptr, *bv = nullptr, *wo = nullptr, *bo = nullptr;
    const GGUFTensorInfo *up = nullptr, *b_up = nullptr, *gate = nullptr, *down = nullptr, *b_down = nullptr;
    Norm attn_out_norm, layer_out_norm;
  };
  bool nomic_ = false;
  float eps_ = 1e-12f;
  const GGUFTensorInfo* tok_embd_ = nullptr;
  const GGUFTensorInfo* type_embd_ = nullptr;
  const GGUFTensorInfo* pos_embd_ = nullptr;
  std::vector<float> type_row_;  // token_types row 0 widened to F32, when it is of another type
  Norm tok_norm_;
  std::vector<Layer> layers_;
};

}  // namespace

std::unique_ptr<Model> make_bert(GGUFFile f) { return std::make_unique<Bert>(std::move(f)); }

}  // namespace weir
