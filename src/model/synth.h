// Random-weight models with the shapes and metadata of real ones (weir
// synth), for benchmarks: the GGUF file llama.cpp's converter would write
// for the preset's architecture, with every weight drawn at random directly
// in its block format (core/quant/random_blocks.h) and streamed to disk tensor
// by tensor through a few MB of buffers, generated on several threads.
//
// Weight scales keep activations finite and varied over long generations:
// projections std 1/sqrt(fan_in), the ones that write into the residual
// stream (attn_output, ffn_down) further / sqrt(2 n_layer); norm weights ~1
// (Gemma's GGUF norms are stored as 1 + w, so ~1 there too); token
// embeddings std 1 when the output matrix is separate, and small enough when
// tied to it that greedy decoding does not just repeat the last token (see
// synth_tensors).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/quant_plan.h"
#include "model/synth_presets.h"

namespace weir {

class GGUFFile;
class GGUFWriter;

struct SynthTensor {
  std::string name;
  int n_dims = 1;
  int64_t ne[4] = {1, 1, 1, 1};
  DType type = DType::F32;
  float mean = 0.0f, std = 0.0f;  // of the random values
  bool rope_freqs = false;        // llama 3 rope factors, computed (not random)
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

// The tensors of a preset with llama.cpp's names, shapes and order, and the
// std of each; types are F32 until planned.
std::vector<SynthTensor> synth_tensors(const SynthPreset& p);

// Llama 3 rope frequency factors (head_dim / 2 of them) of a preset.
std::vector<float> llama3_rope_factors(const SynthPreset& p);

// The architecture's metadata keys (general.*, <arch>.*), general.file_type included.
void write_synth_metadata(GGUFWriter& w, const SynthPreset& p, FileType ft);

// A small SentencePiece ("llama") vocabulary of n tokens (n >= 260): <unk>,
// <s>, </s>, the 256 byte tokens <0x00>..<0xFF>, then filler pieces ("▁",
// printable ASCII, "▁a", "a", "▁b"... up to n). Cheap even for 262k tokens.
void write_synthetic_vocab(GGUFWriter& w, int64_t n);
// A small WordPiece ("bert") vocabulary of n tokens (n >= 300), laid out as
// BERT's: [PAD] 0, [unused0..98], [UNK] 100, [CLS] 101, [SEP] 102, [MASK]
// 103, then word starts "▁c" for printable ASCII, pieces "c" for letters
// and digits, and "▁aa"/"aa", "▁ab"/"ab" ... up to n.
void write_synthetic_wpm_vocab(GGUFWriter& w, int64_t n);
// Copies every tokenizer.* key of f; returns its number of tokens.
int64_t copy_vocab(GGUFWriter& w, const GGUFFile& f);

struct SynthOptions {
  FileType file_type = FileType::MOSTLY_F16;
  uint64_t seed = 1;
  int threads = 1;                 // generator threads (the calling thread writes)
  const GGUFFile* vocab = nullptr; // copy tokenizer.* from here; else a synthetic vocab
  bool sync = true;                // fsync the file before returning
  // Per-tensor types; when empty, plan_tensor_types(file_type) decides.
  std::function<DType(const SynthTensor&)> type_of;
  // Called on the writing thread after each piece: bytes written, total.
  std::function<void(uint64_t, uint64_t)> progress;
};

struct SynthResult {
  uint64_t file_bytes = 0;
  uint64_t data_bytes = 0;
  uint64_t n_params = 0;
  size_t n_tensors = 0;
};

// Writes the model. p.n_vocab must equal the vocabulary's size when
// options.vocab is given (the caller decides and reports the override).
SynthResult write_synth_model(const SynthPreset& p, const SynthOptions& o, const std::string& path);

// The tensors of p with the types they get in a file of type ft.
std::vector<SynthTensor> plan_synth_tensors(const SynthPreset& p, FileType ft);

}  // namespace weir
