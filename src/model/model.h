// A model: GGUF file (weights used in place from the mmap), hyper-parameters,
// tokenizer, and a graph builder for its architecture.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/collective.h"
#include "core/gguf.h"
#include "core/graph.h"
#include "model/hparams.h"
#include "model/kv_cache.h"
#include "text/tokenizer.h"

namespace weir {

// What a forward graph ends in: the logits of its out rows, or their hidden
// states (the last layer's output after the output norm, before the LM
// head: what embeddings are pooled from).
enum class ForwardOutput { Logits, Hidden };

// One forward step's graph and its inputs. The caller fills the inputs,
// runs the graph and reads `logits` ([n_vocab, n_out]), or `hidden`
// ([n_embd, n_out]) in a graph built for ForwardOutput::Hidden.
struct ForwardGraph {
  std::unique_ptr<Graph> graph;
  int64_t n_tokens = 0, n_kv = 0, n_out = 0;
  bool separate_tokens = false;  // one token per sequence (attention's hint)
  Tensor* tokens = nullptr;    // I32 [n_tokens]
  Tensor* pos = nullptr;       // I32 [n_tokens]
  Tensor* kv_cells = nullptr;  // I32 [n_tokens]: cache cell of each token
  Tensor* mask = nullptr;      // F32 [n_kv, n_tokens]: 0 or -inf
  Tensor* mask_swa = nullptr;  // F32 [n_kv, n_tokens], sliding-window layers (or null)
  Tensor* out_rows = nullptr;  // I32 [n_out]: batch rows whose logits are wanted
  Tensor* logits = nullptr;    // F32 [n_vocab, n_out] (ForwardOutput::Logits)
  Tensor* hidden = nullptr;    // F32 [n_embd, n_out] (ForwardOutput::Hidden)
};

class Model {
 public:
  virtual ~Model() = default;
  // Opens a GGUF file and picks the builder for general.architecture.
  static std::unique_ptr<Model> load(const std::string& path);

  const GGUFFile& file() const { return file_; }
  const HParams& hparams() const { return hp_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  // Bytes of weights (tensor data).
  size_t weight_bytes() const;
  uint64_t n_params() const;

  // separate_tokens: each token belongs to a different sequence (batched
  // decode), which attention kernels can use.
  // tp: this graph's rank in a tensor-parallel group (model/shard.h): its
  // share of the heads, FFN and vocab, with the row-parallel products'
  // collectives (tp.row_parallel's form) and the logits' all-gather through
  // tp.comm. The KV cache holds the rank's kv heads.
  // out: Hidden ends the graph at the output norm (no LM head): `hidden`
  // instead of `logits` (every rank gets the whole rows).
  virtual ForwardGraph build(int64_t n_tokens, int64_t n_kv, int64_t n_out, KVCache& kv, bool separate_tokens,
                             const TensorParallel& tp, ForwardOutput out = ForwardOutput::Logits) const = 0;

 protected:
  explicit Model(GGUFFile f);
  // A weight by name, checked for shape; errors name the tensor.
  const GGUFTensorInfo& weight(const std::string& name, std::initializer_list<int64_t> ne) const;
  const GGUFTensorInfo* weight_opt(const std::string& name, std::initializer_list<int64_t> ne) const;
  // Norm weights, biases, rope factors: element-wise operands, which must be F32.
  const GGUFTensorInfo& vector_f32(const std::string& name, int64_t n) const;
  const GGUFTensorInfo* vector_f32_opt(const std::string& name, int64_t n) const;
  // A weight as a graph leaf pointing into the mmap.
  static Tensor* leaf(Graph& g, const GGUFTensorInfo& w);
  // Rows [r0, r1) of a weight (elements of a vector): a leaf on its part of
  // the mmap. Columns [c0, c1) of a 2-D weight: a strided leaf (rows keep
  // the file's stride); c0 and c1 on whole blocks (Error otherwise).
  // Tensor parallelism's shares of a weight (model/shard.h).
  static Tensor* leaf_rows(Graph& g, const GGUFTensorInfo& w, int64_t r0, int64_t r1);
  static Tensor* leaf_cols(Graph& g, const GGUFTensorInfo& w, int64_t c0, int64_t c1);
  // A row-parallel product (Wo, the FFN's down; model/shard.h) of w [K, N]
  // and x, this rank's input rows k of K ([k.size(), T]), in two steps so
  // that a builder can pick columns (get_rows) between them:
  // row_parallel_product gives this rank's part, row_parallel_join the
  // whole W x ([n, T'], n = N) on every rank. PartialSums: W's columns k
  // times x ([N, T], a partial sum), then all_reduce. WholeRows: x gathered
  // (k must be split_range(K)), W's rows split_range(N) times it ([N_r, T]),
  // then all_gather. One rank: W x, and the join returns it.
  static Tensor* row_parallel_product(Graph& g, const GGUFTensorInfo& w, Tensor* x, Range k, const TensorParallel& tp);
  static Tensor* row_parallel_join(Graph& g, Tensor* y, int64_t n, const TensorParallel& tp);

  GGUFFile file_;
  HParams hp_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

using ModelFactory = std::function<std::unique_ptr<Model>(GGUFFile)>;
const std::map<std::string, ModelFactory>& architectures();

}  // namespace weir
