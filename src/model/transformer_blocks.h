// Graph pieces every decoder-only builder needs: the per-step inputs of a
// forward graph, and attention through the KV cache.
#pragma once
#include <cstdint>

#include "model/kv_cache.h"
#include "model/model.h"

namespace weir {

// A ForwardGraph with its graph and inputs made (mask_swa only if with_swa).
ForwardGraph begin_forward(int64_t n_tokens, int64_t n_kv, int64_t n_out, bool with_swa, bool separate_tokens);

// Writes this batch's k [Dk, Hkv, T] and v [Dv * Hkv, T] into layer il's
// cache cells (fg.kv_cells), then attends q [Dk, Hq, T] over the first n_kv
// cells with mask; returns [Dv * Hq, T]. max_keys: the keys a token sees at
// most where mask is a sliding window's (graph.h's attention hint), else 0;
// extras: graph.h's attention extras (a soft cap, sinks).
Tensor* cached_attention(Graph& g, const ForwardGraph& fg, KVCache& kv, int il, Tensor* q, Tensor* k,
                         Tensor* v, Tensor* mask, float scale, int32_t max_keys = 0,
                         const AttentionExtras& extras = {});

}  // namespace weir
