// What a benchmark says about a model: llama-bench's one-line description
// ("gemma3 270M Q4_K - Medium"), and the bytes one decode step must read
// from memory, the numerator of its bandwidth.
#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/gguf.h"
#include "model/hparams.h"

namespace weir {

// llama.cpp's name of a general.file_type value ("Q4_K - Medium", "all F32").
const char* file_type_description(uint32_t file_type);

// "<arch> <size> <file type>": the size from general.size_label, else from
// the parameter count ("50K", "270M", "1.2B"); the file type from
// general.file_type, else guessed from the commonest matrix type, as
// llama.cpp does (" (guessed)").
std::string model_description(const GGUFFile& f);

// A mixture of experts' share of its expert tensors (blk.N.ffn_*_exps)
// that one token uses: expert_used_count of expert_count. Dense models and
// files whose counts make no sense: no experts (every tensor used whole).
struct ExpertShare {
  uint64_t n_expert = 0, n_used = 0;
  bool is_expert(const GGUFTensorInfo& t) const;
  uint64_t used(uint64_t whole) const { return whole / n_expert * n_used; }  // of an expert tensor
};
ExpertShare expert_share(const GGUFFile& f);

// Weight bytes one decoded token reads: every tensor in full, except the
// token embedding, whose lookup reads one row; when the output projection is
// tied to it (no output.weight), the projection reads it in full; of a
// mixture of experts' expert tensors, expert_used_count / expert_count.
uint64_t decode_weight_bytes(const GGUFFile& f);

// KV cache bytes the attention of one decoded token reads at a context of
// n_ctx tokens: K and V rows of each layer; a sliding-window layer reads at
// most n_swa of them.
uint64_t decode_kv_bytes(const HParams& hp, DType kv_type, int64_t n_ctx);

}  // namespace weir
