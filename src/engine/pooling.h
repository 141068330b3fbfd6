// Pooling: one vector for a sequence from its tokens' hidden states (the
// last layer's outputs after the output norm), as an embedding model's GGUF
// asks for it in <arch>.pooling_type, and the L2 normalization embeddings
// are usually compared under (cosine similarity = dot product).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace weir {

class Model;

// GGUF's numbering (llama.cpp's enum llama_pooling_type); rank (4, a
// reranker's classifier head) is not supported.
enum class Pooling {
  None = 0,  // no pooling: every token's vector
  Mean = 1,  // the mean of the tokens' vectors
  Cls = 2,   // the first token's vector (BERT's [CLS])
  Last = 3,  // the last token's vector (decoder embedding models)
};

// The pooling a model's file asks for: <arch>.pooling_type; without that
// key (decoder language models such as Gemma 3), Mean. Throws Error naming
// the key for rank (4) or an unknown value.
Pooling model_pooling(const Model& m);

// "none", "mean", "cls", "last" (the --pooling flag's values); nullopt for
// anything else.
std::optional<Pooling> parse_pooling(std::string_view name);
const char* pooling_name(Pooling p);

// Whether pooling p reads the hidden state of position pos of a sequence
// of len tokens (Mean and None: every one; Cls: the first; Last: the last).
bool pooling_reads(Pooling p, int64_t pos, int64_t len);

// Scales v to Euclidean length 1 (a zero vector stays zero).
void normalize_l2(std::span<float> v);

}  // namespace weir
