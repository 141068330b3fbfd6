#include "model/transformer_blocks.h"

#include <memory>

namespace weir {

ForwardGraph begin_forward(int64_t T, int64_t n_kv, int64_t n_out, bool with_swa, bool separate_tokens) {
  ForwardGraph fg;
  fg.graph = std::make_unique<Graph>();
  Graph& g = *fg.graph;
  fg.n_tokens = T;
  fg.n_kv = n_kv;
  fg.n_out = n_out;
  fg.separate_tokens = separate_tokens;
  fg.tokens = g.input(DType::I32, {T}, "tokens");
  fg.pos = g.input(DType::I32, {T}, "pos");
  fg.kv_cells = g.input(DType::I32, {T}, "kv_cells");
  fg.mask = g.input(DType::F32, {n_kv, T}, "mask");
  fg.mask_swa = with_swa ? g.input(DType::F32, {n_kv, T}, "mask_swa") : nullptr;
  fg.out_rows = g.input(DType::I32, {n_out}, "out_rows");
  return fg;
}

Tensor* cached_attention(Graph& g, const ForwardGraph& fg, KVCache& kv, int il, Tensor* q, Tensor* k,
                         Tensor* v, Tensor* mask, float scale, int32_t max_keys,
                         const AttentionExtras& extras) {
  const int64_t Dk = k->ne[0], Hkv = k->ne[1], T = k->ne[2];
  const int64_t Dv = v->ne[0] / Hkv, n_kv = fg.n_kv;
  Tensor* kc = g.external(kv.dtype(), {Dk * Hkv, kv.n_cells()}, kv.k(il), "cache_k");
  Tensor* vc = g.external(kv.dtype(), {Dv * Hkv, kv.n_cells()}, kv.v(il), "cache_v");
  kc = g.set_rows(kc, g.reshape(k, {Dk * Hkv, T}), fg.kv_cells);
  vc = g.set_rows(vc, v, fg.kv_cells);
  Tensor* kview = g.view(kc, {Dk, Hkv, n_kv}, {row_bytes(kv.dtype(), Dk), kv.k_row_bytes()}, 0);
  Tensor* vview = g.view(vc, {Dv, Hkv, n_kv}, {row_bytes(kv.dtype(), Dv), kv.v_row_bytes()}, 0);
  return g.attention(q, kview, vview, mask, scale, fg.separate_tokens, max_keys, extras);
}

}  // namespace weir
