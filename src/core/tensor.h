// Tensor: shape, strides, dtype and a pointer into a buffer, plus the op that
// produces it when it is a graph node. ne[0] is the contiguous dimension
// (GGUF/ggml order): a weight of ne = {K, N} has N rows of K elements.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace weir {
class Collective;
}

namespace weir {

// The closed op set. Semantics are written down in core/graph.h.
enum class Op : uint8_t {
  Leaf,      // no op: weights, inputs, KV cache
  View,      // a window onto another tensor's data (no compute)
  GetRows,   // rows of a table by index
  MulMat,    // y = W x
  RmsNorm,   // x / rms(x) per row
  Mul,       // a * b, b broadcast over rows
  Add,       // a + b, b broadcast over rows
  Scale,     // a * s
  Rope,      // rotary position embedding
  GeluMul,   // gelu_tanh(a) * b
  SiluMul,   // silu(a) * b (SwiGLU)
  Attention, // softmax(q k^T * scale + mask) v, per head, GQA
  SetRows,   // dst[idx[i]] = src[i] (writes into a leaf, e.g. the KV cache)
  Sample,    // a token id per row of logits (greedy, temperature, top-k/p, min-p)
  AllReduce, // sum over the ranks of a tensor-parallel group (core/collective.h)
  AllGather, // rows split over the ranks, gathered on every rank
  TopK,      // indices of the k largest values of each column (expert routing)
  MoeWeights,// the routing weights of the chosen experts (softmax, normalized)
  MulMatId,  // y = W[expert] x for each token's chosen experts
  MoeSum,    // the experts' outputs weighted and summed
  AllowTokens,  // logits with the tokens a bitmask does not allow set to -inf (constrained decoding)
  SwigluOai,  // gpt-oss's clamped SwiGLU of an expert's gate and up
  Softcap,   // cap * tanh(a / cap): Gemma 2's final logit soft-capping
  LayerNorm, // (x - mean(x)) / sqrt(var(x) + eps) per row (BERT)
  Gelu,      // gelu_tanh(a) (BERT's FFN)
  Count,
};
const char* op_name(Op op);

// Which dimensions rope rotates together. Stored in a rope node's
// iparams[1]; Neox is 0 so nodes made before modes existed keep their meaning.
enum class RopeMode : int32_t {
  Neox = 0,    // split halves (i, i + n_rot/2): GPT-NeoX, Qwen, Gemma
  Normal = 1,  // adjacent pairs (2i, 2i + 1): Llama, Mistral
};

inline constexpr int kMaxDims = 4;
inline constexpr int kMaxSrc = 5;

struct Tensor {
  DType dtype = DType::F32;
  int64_t ne[kMaxDims] = {1, 1, 1, 1};
  size_t nb[kMaxDims] = {0, 0, 0, 0};
  void* data = nullptr;

  Op op = Op::Leaf;
  Tensor* src[kMaxSrc] = {};
  int32_t iparams[4] = {};
  float fparams[4] = {};
  Tensor* view_src = nullptr;  // for Op::View: whose data this looks at
  Collective* comm = nullptr;  // for Op::AllReduce / AllGather: the group
  size_t view_offset = 0;
  int id = -1;  // index in its graph
  std::string name;

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  size_t row_size() const { return row_bytes(dtype, ne[0]); }
  size_t n_bytes() const { return row_size() * size_t(n_rows()); }
  bool is_contiguous() const;
  // The tensor that owns the memory this one sees (follows views).
  const Tensor* storage() const { return view_src ? view_src->storage() : this; }
  Tensor* storage() { return view_src ? view_src->storage() : this; }
  template <typename T = float>
  T* row_ptr(int64_t i1, int64_t i2 = 0, int64_t i3 = 0) const {
    return reinterpret_cast<T*>(static_cast<char*>(data) + i1 * nb[1] + i2 * nb[2] + i3 * nb[3]);
  }
};

// Contiguous strides for a shape.
void set_contiguous_strides(Tensor& t);

}  // namespace weir
