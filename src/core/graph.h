// The graph IR: a list of tensors in creation order. Ops may only read
// tensors created before them, so creation order is a valid execution order.
// A graph for a batch shape is built once and run many times: per-step values
// (token ids, positions, masks) live in input tensors that the caller fills
// before each run, never in op parameters.
//
// Op semantics (all activations F32; W may be any dequantizable dtype):
//   get_rows(table [K, N], ids I32 [T])          -> [K, T]   row ids[t] of table
//   mul_mat(W [K, N], x [K, T])                  -> [N, T]   y[:, t] = W x[:, t]
//   rms_norm(x [K, ...], eps)                    -> same     x / sqrt(mean(x^2) + eps) per row
//   layer_norm(x [K, ...], eps)                  -> same     (x - m) / sqrt(v + eps) per row, m the
//       row's mean, v the mean of (x - m)^2 (no weight or bias: mul and add them)
//   mul(a [K, ...], b [K, 1 or same])            -> a's shape; b broadcast over rows
//   add(a, b)                                     -> idem
//   scale(a, s)                                   -> a * s
//   softcap(a, cap)                               -> cap * tanh(a / cap), cap > 0 and finite
//       (Gemma 2's final logit soft-capping: logits bent smoothly into (-cap, cap))
//   rope(x [D, H, T], pos I32 [T], {n_rot, base, freq_scale, mode, freq_factors})
//       rotates pair i (i < n_rot/2) of each head of token t by
//         theta_i = freq_scale * pos[t] * base^(-2i/n_rot) / ff[i]
//       where ff = freq_factors (F32 [n_rot/2], Llama 3 "rope_freqs") or 1.
//       mode Neox pairs dims (i, i + n_rot/2); mode Normal pairs (2i, 2i + 1).
//       A pair (a, b) becomes (a cos - b sin, a sin + b cos); dims >= n_rot
//       are copied. rope_neox(x, pos, n_rot, base, freq_scale) is mode Neox
//       without factors.
//   gelu_mul(a, b)                                -> gelu_tanh(a) * b
//   gelu(a)                                       -> gelu_tanh(a) (ggml_gelu: BERT's FFN)
//   silu_mul(a, b)                                -> silu(a) * b = a / (1 + e^-a) * b
//   swiglu_oai(a, b, alpha, limit)                -> x / (1 + e^(-alpha x)) * (y + 1) with
//       x = min(a, limit), y = clamp(b, -limit, limit) (gpt-oss's experts:
//       a the gate, b the up projection; alpha 1.702, limit 7)
//   attention(q [D, Hq, T], k [D, Hkv, S], v [D, Hkv, S], mask [S, T], scale,
//             separate_tokens)
//       -> [D*Hq, T]; head h uses kv head h / (Hq/Hkv); mask adds 0 or -inf.
//       separate_tokens (iparams[0]) is a hint that no two tokens see the
//       same keys (a decode step of one token per sequence): kernels should
//       take tokens one at a time rather than share key reads among them.
//       max_keys (iparams[1]) is a hint that a token sees at most that many
//       keys (a sliding window; 0: no bound known): the CUDA backend plans
//       how to split the keys with it. The mask alone decides the result.
//       Extras (AttentionExtras; both off by default):
//       softcap (fparams[1], > 0): s_j = softcap * tanh(q.k_j * scale / softcap)
//         before the mask is added (Gemma 2's attention logit soft-capping);
//       sinks (src[4], F32 [Hq]): head h's softmax counts one more key of
//         score sinks[h] and no value: p_j = e^(s_j - m) / (sum_i e^(s_i - m)
//         + e^(sinks[h] - m)), m the max over the keys and the sink (gpt-oss).
//         A row with every key masked still gives zeros.
//   set_rows(dst [K, N], src [K, T], idx I32 [T]) -> dst with dst[:, idx[t]] = src[:, t]
//   sample(logits [V, n], params [5, n])          -> I32 [n]: a token per row, as
//       engine/sampler.h's chain without the repetition penalty. Row j's
//       params: temperature, top_k, top_p, min_p, u (a uniform draw in
//       [0, 1)). temperature <= 0: argmax, lowest id on ties. Otherwise
//       top-k (<= 0: off; ties at the boundary: lowest ids win), then top-p
//       (1: off) and min-p (0: off) on the softmax at temperature 1 over what
//       top-k kept, then a draw from softmax((logit - max) / temperature)
//       over the rest, in probability order (id order when neither top-k nor
//       top-p ran): the first token whose cumulative weight exceeds
//       u * total. NaN logits count as -inf; a row of only -inf/NaN gives -1.
//   allow_tokens(logits [V, n], allow I32 [(V + 31) / 32, n]) -> F32 [V, n]:
//       logits[v, j] where bit v % 32 of allow[v / 32, j] is set, else -inf
//       (the tokens a grammar allows, before sample: engine/grammar/grammar.h).
//   all_reduce(x, comm)                           -> same: the sum of x over the ranks
//       of comm's group (every rank gets the same bits: core/collective.h)
//   all_gather(x [n_r, T], total, comm)           -> [total, T]: rank r's rows
//       at split_range(total, size, r) of every column, on every rank
// Mixture of experts (a token's FFN is the weighted sum of k of E experts'):
//   top_k(x [E, T], k)                            -> I32 [k, T]: the indices of the k
//       largest values of each column, largest first; ties: the lower index
//       first; NaN counts as -inf
//   moe_weights(logits [E, T], ids I32 [k, T], normalize)
//                                                 -> [k, T]: p = softmax(logits[:, t])
//       (max subtracted, float sums in index order), w[j, t] = p[ids[j, t]],
//       then divided by their sum (in j order) when normalize (iparams[0])
//   mul_mat_id(W [K, N, E], x [K, X, T], ids I32 [k, T])
//                                                 -> [N, k, T]: y[:, j, t] = W_e x[:, j', t]
//       with e = ids[j, t] and W_e = W[:, :, e]; X = 1 (j' = 0: every expert
//       reads the token's x) or X = k (j' = j: slot j its own input)
//   moe_sum(y [N, k, T], w [k, T])                -> [N, T]: sum over j of w[j, t] y[:, j, t],
//       j in order
#pragma once
#include <deque>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace weir {

// attention's optional extras (see the op's semantics above).
struct AttentionExtras {
  Tensor* sinks = nullptr;  // F32 [Hq]: a sink logit per query head
  float softcap = 0.0f;     // > 0: the scores' soft cap
};

struct RopeParams {
  int n_rot = 0;  // rotated dims per head (even, <= head dim)
  float base = 10000.0f;
  float freq_scale = 1.0f;  // 1 / linear scaling factor
  RopeMode mode = RopeMode::Neox;
  Tensor* freq_factors = nullptr;  // optional F32 [n_rot/2]: theta_i is divided by it
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // A tensor whose memory is someone else's (weights in the mmap, KV cache).
  Tensor* external(DType t, std::initializer_list<int64_t> ne, void* data, std::string name);
  // A tensor the caller fills before each run; the backend allocates it.
  Tensor* input(DType t, std::initializer_list<int64_t> ne, std::string name);
  // Marks a node whose value the caller reads after the run.
  void mark_output(Tensor* t);

  Tensor* get_rows(Tensor* table, Tensor* ids);
  Tensor* mul_mat(Tensor* w, Tensor* x);
  Tensor* rms_norm(Tensor* x, float eps);
  Tensor* layer_norm(Tensor* x, float eps);
  Tensor* mul(Tensor* a, Tensor* b);
  Tensor* add(Tensor* a, Tensor* b);
  Tensor* scale(Tensor* a, float s);
  Tensor* softcap(Tensor* a, float cap);
  Tensor* rope(Tensor* x, Tensor* pos, const RopeParams& p);
  Tensor* rope_neox(Tensor* x, Tensor* pos, int n_rot, float base, float freq_scale);
  Tensor* gelu_mul(Tensor* a, Tensor* b);
  Tensor* gelu(Tensor* a);
  Tensor* silu_mul(Tensor* a, Tensor* b);
  Tensor* swiglu_oai(Tensor* a, Tensor* b, float alpha, float limit);
  Tensor* attention(Tensor* q, Tensor* k, Tensor* v, Tensor* mask, float scale, bool separate_tokens = false,
                    int32_t max_keys = 0, const AttentionExtras& extras = {});
  Tensor* set_rows(Tensor* dst, Tensor* src, Tensor* idx);
  Tensor* sample(Tensor* logits, Tensor* params);
  Tensor* allow_tokens(Tensor* logits, Tensor* allow);
  Tensor* top_k(Tensor* x, int k);
  Tensor* moe_weights(Tensor* logits, Tensor* ids, bool normalize);
  Tensor* mul_mat_id(Tensor* w, Tensor* x, Tensor* ids);
  Tensor* moe_sum(Tensor* y, Tensor* w);
  Tensor* all_reduce(Tensor* x, Collective* comm);
  Tensor* all_gather(Tensor* x, int64_t total, Collective* comm);

  // Views share data with src: reshape (src contiguous) and a strided window.
  Tensor* reshape(Tensor* src, std::initializer_list<int64_t> ne);
  Tensor* view(Tensor* src, std::initializer_list<int64_t> ne, std::initializer_list<size_t> nb,
               size_t offset);

  // A copy of t, a tensor of another graph: the same op, shape, strides,
  // parameters and name, its sources and view source replaced by map(src).
  // A leaf keeps its data pointer (external memory, or none for an input);
  // a node gets its memory when this graph is planned.
  Tensor* clone(const Tensor& t, const std::function<Tensor*(const Tensor*)>& map);

  const std::deque<Tensor>& tensors() const { return tensors_; }
  std::deque<Tensor>& tensors() { return tensors_; }
  const std::vector<Tensor*>& outputs() const { return outputs_; }

 private:
  Tensor* make(DType t, std::initializer_list<int64_t> ne, Op op, std::string name);
  Tensor* unary_like(Tensor* a, Op op);
  std::deque<Tensor> tensors_;  // stable addresses
  std::vector<Tensor*> outputs_;
};

}  // namespace weir
