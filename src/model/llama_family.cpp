// The Llama family: one builder for llama (Llama 2/3, Mistral), qwen2,
// qwen3 and phi3 (Phi-3, Phi-4), which differ only in flags (Flavor).
//   x = token_embd[tokens]
//   per layer:  h = rms_norm(x) * attn_norm
//               q, k, v = Wq h (+bq), Wk h (+bk), Wv h (+bv)       GQA
//               q, k = rms_norm per head * q_norm / k_norm        (qwen3)
//               q, k = rope(q), rope(k)   Normal pairs (llama) or Neox (qwen),
//                      first n_rot dims, rope_freqs.weight factors if present
//               x += Wo attention(q, k, v; scale 1/sqrt(head_dim)) (+bo)
//               x += W_down (silu(W_gate h2) * W_up h2),  h2 = rms_norm(x) * ffn_norm
//   logits = output (or token_embd when absent) @ (rms_norm(x) * output_norm)
// phi3 (llama.cpp's names and rules): Wq, Wk, Wv may be the row blocks of one
// fused attn_qkv [E, Nq + Nk + Nv] (q, k, v rows in that order), and W_gate,
// W_up are always the row blocks of one ffn_up [E, 2F] (gate rows, then up);
// each block is a leaf on its rows, so no product is split. Neox rope with
// per-pair factors rope_factors_short.weight while the context (KV cells) is
// within rope.scaling.original_context_length, else rope_factors_long.weight,
// and rope.scaling.attn_factor m multiplying the rotated q and k (here: the
// attention scale times m^2, the same scores). attention.sliding_window is
// ignored, as llama.cpp does (its converters write it wrong).
//   (ForwardOutput::Hidden: the rows rms_norm(x) * output_norm themselves, no logits)
// Mixture of experts (mixtral: llama with llama.expert_count; qwen3moe:
// qwen3's attention): every layer's FFN is
//               ids = the expert_used_count largest of Wr h2 (Wr: ffn_gate_inp)
//               w = softmax(Wr h2)[ids], divided by their sum
//               x += sum_j w_j We_down (silu(We_gate h2) * We_up h2),  e = ids_j
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/warn.h"
#include "model/model.h"
#include "model/shard.h"
#include "model/transformer_blocks.h"

namespace weir {
namespace {

struct Flavor {
  RopeMode rope_mode;
  bool qkv_bias_required;  // qwen2 always has them; llama may
  bool qk_norm;            // qwen3
  bool experts_required;   // qwen3moe (llama has experts when expert_count says so: mixtral)
  bool phi3 = false;       // fused attn_qkv / ffn_up, long and short rope factors
};

// Keys of MoE variants this builder does not compute: refused by name.
void refuse_other_moe(const GGUFFile& f, const std::string& arch) {
  const std::string p = arch + ".";
  if (f.get_uint_or(p + "expert_shared_count", 0) > 0)
    throw Error(f.name() + ": " + p + "expert_shared_count > 0: shared experts are not supported");
  if (f.get_uint_or(p + "expert_gating_func", 1) != 1)
    throw Error(f.name() + ": " + p + "expert_gating_func " + std::to_string(f.get_uint_or(p + "expert_gating_func", 1)) +
                ": only softmax gating (1) is supported");
  if (const double s = f.get_float_or(p + "expert_weights_scale", 1.0); s != 1.0)
    throw Error(f.name() + ": " + p + "expert_weights_scale " + std::to_string(s) + ": scaled expert weights are not supported");
  if (f.get_uint_or(p + "expert_group_count", 0) > 1)
    throw Error(f.name() + ": " + p + "expert_group_count > 1: grouped expert routing is not supported");
}

class LlamaFamily final : public Model {
 public:
  LlamaFamily(GGUFFile f, Flavor fl) : Model(std::move(f)), fl_(fl) {
    if (fl_.experts_required && hp_.n_expert == 0)
      throw Error(file_.name() + ": " + hp_.arch + ".expert_count is missing or 0; a " + hp_.arch + " model has experts");
    if (hp_.n_expert > 0) refuse_other_moe(file_, hp_.arch);
    if (fl_.phi3) read_phi3_rope();
    const int64_t E = hp_.n_embd, V = hp_.n_vocab, F = hp_.n_ff;
    const int64_t NE = hp_.n_expert, FE = hp_.n_ff_exp;
    const int64_t Dk = hp_.head_dim_k, Dv = hp_.head_dim_v;
    const int64_t Nq = Dk * hp_.n_head, Nk = Dk * hp_.n_head_kv, Nv = Dv * hp_.n_head_kv;
    tok_embd_ = &weight("token_embd.weight", {E, V});
    output_norm_ = &vector_f32("output_norm.weight", E);
    output_ = weight_opt("output.weight", {E, V});
    if (!output_) output_ = tok_embd_;
    if (!fl_.phi3) rope_freqs_ = vector_f32_opt("rope_freqs.weight", hp_.n_rot / 2);
    auto bias = [&](const std::string& name, int64_t n) {
      return fl_.qkv_bias_required ? &vector_f32(name, n) : vector_f32_opt(name, n);
    };
    for (int64_t il = 0; il < hp_.n_layer; ++il) {
      const std::string b = "blk." + std::to_string(il) + ".";
      Layer L;
      L.attn_norm = &vector_f32(b + "attn_norm.weight", E);
      if (const GGUFTensorInfo* qkv = fl_.phi3 ? weight_opt(b + "attn_qkv.weight", {E, Nq + Nk + Nv}) : nullptr) {
        L.wq = L.wk = L.wv = qkv;  // row blocks q, k, v
        L.k0 = Nq;
        L.v0 = Nq + Nk;
      } else {
        L.wq = &weight(b + "attn_q.weight", {E, Nq});
        L.wk = &weight(b + "attn_k.weight", {E, Nk});
        L.wv = &weight(b + "attn_v.weight", {E, Nv});
      }
      L.bq = bias(b + "attn_q.bias", Nq);
      L.bk = bias(b + "attn_k.bias", Nk);
      L.bv = bias(b + "attn_v.bias", Nv);
      if (fl_.qk_norm) {
        L.q_norm = &vector_f32(b + "attn_q_norm.weight", Dk);
        L.k_norm = &vector_f32(b + "attn_k_norm.weight", Dk);
      }
      L.wo = &weight(b + "attn_output.weight", {Dv * hp_.n_head, E});
      L.bo = vector_f32_opt(b + "attn_output.bias", E);
      L.ffn_norm = &vector_f32(b + "ffn_norm.weight", E);
      if (NE > 0) {
        L.router = &weight(b + "ffn_gate_inp.weight", {E, NE});
        L.gate = &weight(b + "ffn_gate_exps.weight", {E, FE, NE});
        L.up = &weight(b + "ffn_up_exps.weight", {E, FE, NE});
        L.down = &weight(b + "ffn_down_exps.weight", {FE, E, NE});
      } else if (fl_.phi3) {
        L.gate = L.up = &weight(b + "ffn_up.weight", {E, 2 * F});  // row blocks gate, up
        L.up0 = F;
        L.down = &weight(b + "ffn_down.weight", {F, E});
      } else {
        L.gate = &weight(b + "ffn_gate.weight", {E, F});
        L.up = &weight(b + "ffn_up.weight", {E, F});
        L.down = &weight(b + "ffn_down.weight", {F, E});
      }
      layers_.push_back(L);
    }
  }

  ForwardGraph build(int64_t T, int64_t n_kv, int64_t n_out, KVCache& kv, bool separate_tokens,
                     const TensorParallel& tp, ForwardOutput out) const override {
    const HParams& h = hp_;
    const int64_t Dk = h.head_dim_k, Dv = h.head_dim_v;
    // This rank's share (all of it without tensor parallelism).
    const HeadShard hs = shard_heads(h, tp);
    const int64_t Hq = hs.nq, Hkv = hs.nkv;
    const bool split = tp.size > 1;
    if (split && h.n_expert > 0)
      throw Error("tensor parallel (--tp) of mixture-of-experts models is not supported yet");
    ForwardGraph fg = begin_forward(T, n_kv, n_out, false, separate_tokens);
    Graph& g = *fg.graph;
    auto norm = [&](Tensor* x, const GGUFTensorInfo* w) { return g.mul(g.rms_norm(x, h.rms_eps), leaf(g, *w)); };
    // y = W[r0:r1] x: the rows of a head group; + b[r0:r1] (bias_rows).
    auto linear_rows = [&](const GGUFTensorInfo* w, Tensor* x, int64_t r0, int64_t r1) {
      return g.mul_mat(leaf_rows(g, *w, r0, r1), x);
    };
    auto bias_rows = [&](Tensor* y, const GGUFTensorInfo* b, int64_t r0, int64_t r1) {
      return b ? g.add(y, leaf_rows(g, *b, r0, r1)) : y;
    };
    RopeParams rope{int(h.n_rot), h.rope_base, h.rope_freq_scale, fl_.rope_mode, nullptr};
    if (rope_freqs_) rope.freq_factors = leaf(g, *rope_freqs_);
    // phi3: the factors for this cache's context (llama.cpp: long past the original context).
    if (const GGUFTensorInfo* f = kv.n_cells() > n_ctx_orig_ ? rope_long_ : rope_short_) rope.freq_factors = leaf(g, *f);

    Tensor* x = g.get_rows(leaf(g, *tok_embd_), fg.tokens);  // [E, T]
    for (int64_t il = 0; il < h.n_layer; ++il) {
      const Layer& L = layers_[size_t(il)];
      Tensor* cur = norm(x, L.attn_norm);
      // The three products first, then their biases (qwen2): products on
      // the same x one after the other run as one launch on a GPU.
      // (Wk's rows start at k0 and Wv's at v0 of a fused attn_qkv.)
      Tensor* q = linear_rows(L.wq, cur, hs.q0 * Dk, (hs.q0 + Hq) * Dk);
      Tensor* k = linear_rows(L.wk, cur, L.k0 + hs.kv0 * Dk, L.k0 + (hs.kv0 + Hkv) * Dk);
      Tensor* v = linear_rows(L.wv, cur, L.v0 + hs.kv0 * Dv, L.v0 + (hs.kv0 + Hkv) * Dv);  // [Dv*Hkv, T]
      q = g.reshape(bias_rows(q, L.bq, hs.q0 * Dk, (hs.q0 + Hq) * Dk), {Dk, Hq, T});
      k = g.reshape(bias_rows(k, L.bk, hs.kv0 * Dk, (hs.kv0 + Hkv) * Dk), {Dk, Hkv, T});
      v = bias_rows(v, L.bv, hs.kv0 * Dv, (hs.kv0 + Hkv) * Dv);
      if (fl_.qk_norm) {
        q = norm(q, L.q_norm);
        k = norm(k, L.k_norm);
      }
      q = g.rope(q, fg.pos, rope);
      k = g.rope(k, fg.pos, rope);
      cur = cached_attention(g, fg, kv, int(il), q, k, v, fg.mask, h.attn_scale * rope_attn_factor_ * rope_attn_factor_);
      // Wo cur: this rank's part (row_parallel_product), then every rank's: [E, T]
      cur = row_parallel_product(g, *L.wo, cur, {hs.q0 * Dv, (hs.q0 + Hq) * Dv}, tp);

      if (il == h.n_layer - 1) {  // only the rows whose logits are wanted go on
        cur = g.get_rows(cur, fg.out_rows);
        x = g.get_rows(x, fg.out_rows);
      }
      cur = row_parallel_join(g, cur, h.n_embd, tp);
      if (L.bo) cur = g.add(cur, leaf(g, *L.bo));
      x = g.add(cur, x);
      cur = norm(x, L.ffn_norm);
      if (L.router) {
        x = g.add(expert_ffn(g, L, cur), x);
        continue;
      }
      const Range ff = shard_ffn(h.n_ff, L.down->dtype, tp);
      cur = g.silu_mul(g.mul_mat(leaf_rows(g, *L.gate, ff.begin, ff.end), cur),
                       g.mul_mat(leaf_rows(g, *L.up, L.up0 + ff.begin, L.up0 + ff.end), cur));  // [F, T]
      x = g.add(row_parallel_join(g, row_parallel_product(g, *L.down, cur, ff, tp), h.n_embd, tp), x);
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
    const GGUFTensorInfo *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *gate, *up, *down;
    const GGUFTensorInfo* router = nullptr;  // MoE: gate, up, down are the experts' [.., .., n_expert]
    const GGUFTensorInfo *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;  // optional
    const GGUFTensorInfo *q_norm = nullptr, *k_norm = nullptr;                    // qwen3
    int64_t k0 = 0, v0 = 0, up0 = 0;  // first rows of Wk, Wv, W_up in their tensor (phi3's fused ones)
  };
  // The MoE FFN of h [E, T]: [E, T].
  Tensor* expert_ffn(Graph& g, const Layer& L, Tensor* h) const {
    const int64_t E = hp_.n_embd, T = h->ne[1];
    Tensor* logits = g.mul_mat(leaf(g, *L.router), h);  // [n_expert, T]
    Tensor* ids = g.top_k(logits, int(hp_.n_expert_used));
    Tensor* w = g.moe_weights(logits, ids, true);
    Tensor* x = g.reshape(h, {E, 1, T});
    Tensor* par = g.silu_mul(g.mul_mat_id(leaf(g, *L.gate), x, ids), g.mul_mat_id(leaf(g, *L.up), x, ids));
    return g.moe_sum(g.mul_mat_id(leaf(g, *L.down), par, ids), w);  // [E, T]
  }

  // phi3's rope: factors, the context they switch at, the attention factor.
  void read_phi3_rope() {
    const std::string p = hp_.arch + ".";
    if (hp_.n_swa > 0)
      warn(file_.name() + ": " + p + "attention.sliding_window " + std::to_string(hp_.n_swa) +
           " is ignored: every layer attends to the whole context (as llama.cpp does for phi3)");
    hp_.n_swa = 0;
    rope_long_ = vector_f32_opt("rope_factors_long.weight", hp_.n_rot / 2);
    rope_short_ = vector_f32_opt("rope_factors_short.weight", hp_.n_rot / 2);
    if (!rope_long_ != !rope_short_)
      throw Error(file_.name() + ": rope_factors_long.weight and rope_factors_short.weight come together; " +
                  (rope_long_ ? "rope_factors_short" : "rope_factors_long") + ".weight is missing");
    n_ctx_orig_ = int64_t(file_.get_uint_or(p + "rope.scaling.original_context_length", uint64_t(hp_.n_ctx_train)));
    const double m = file_.get_float_or(p + "rope.scaling.attn_factor", 1.0);
    if (!std::isfinite(m) || m <= 0)
      throw Error(file_.name() + ": " + p + "rope.scaling.attn_factor is " + std::to_string(m) +
                  "; it must be a positive finite number");
    if (m != 1.0 && hp_.n_rot != hp_.head_dim_k)
      throw Error(file_.name() + ": " + p + "rope.scaling.attn_factor " + std::to_string(m) +
                  " with partial rope (rope.dimension_count " + std::to_string(hp_.n_rot) + " < head size " +
                  std::to_string(hp_.head_dim_k) + ") is not supported");
    rope_attn_factor_ = float(m);
  }

  Flavor fl_;
  const GGUFTensorInfo* tok_embd_ = nullptr;
  const GGUFTensorInfo* output_norm_ = nullptr;
  const GGUFTensorInfo* output_ = nullptr;
  const GGUFTensorInfo* rope_freqs_ = nullptr;
  const GGUFTensorInfo *rope_long_ = nullptr, *rope_short_ = nullptr;  // phi3
  int64_t n_ctx_orig_ = 0;       // phi3: short factors up to this many KV cells
  float rope_attn_factor_ = 1.0f;
  std::vector<Layer> layers_;
};

}  // namespace

std::unique_ptr<Model> make_llama(GGUFFile f) {
  return std::make_unique<LlamaFamily>(std::move(f), Flavor{RopeMode::Normal, false, false, false});
}
std::unique_ptr<Model> make_qwen2(GGUFFile f) {
  return std::make_unique<LlamaFamily>(std::move(f), Flavor{RopeMode::Neox, true, false, false});
}
std::unique_ptr<Model> make_qwen3(GGUFFile f) {
  return std::make_unique<LlamaFamily>(std::move(f), Flavor{RopeMode::Neox, false, true, false});
}
std::unique_ptr<Model> make_qwen3moe(GGUFFile f) {
  return std::make_unique<LlamaFamily>(std::move(f), Flavor{RopeMode::Neox, false, true, true});
}
std::unique_ptr<Model> make_phi3(GGUFFile f) {
  return std::make_unique<LlamaFamily>(std::move(f), Flavor{RopeMode::Neox, false, false, false, true});
}

}  // namespace weir
