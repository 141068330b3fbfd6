// A tokenizer vocabulary read from GGUF metadata (tokenizer.ggml.*): token
// texts, scores, types, special ids and flags, the end-of-generation set, and a
// fast piece -> id map. It owns its data (all token texts in one contiguous
// buffer plus offsets), so the GGUFFile may be closed once it is built.
//
// Token attributes follow llama.cpp (llama_token_attr): the raw GGUF type of
// each token is mapped to one attribute bit, then llama.cpp's load-time
// overrides are applied, since tokenization depends on them:
// - tokens whose text names an end of turn/generation ("<end_of_turn>",
//   "<|im_end|>", "</s>", "<|endoftext|>", ...) or a FIM token get the CONTROL
//   bit added and join the EOG set (Gemma 3's "</s>", id 212, is USER_DEFINED
//   in the file and becomes USER_DEFINED|CONTROL);
// - CONTROL tokens whose text contains "unused" get the UNUSED bit;
// - the gpt-oss / solar-open / gemma4 workarounds, and LSTRIP/RSTRIP for the
//   phi-3 and jina/nomic/modern-bert families.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace weir {

class GGUFFile;

// llama.cpp's token attribute bits.
enum TokenAttr : uint16_t {
  TOKEN_ATTR_UNDEFINED = 0,
  TOKEN_ATTR_UNKNOWN = 1 << 0,
  TOKEN_ATTR_UNUSED = 1 << 1,
  TOKEN_ATTR_NORMAL = 1 << 2,
  TOKEN_ATTR_CONTROL = 1 << 3,  // special token
  TOKEN_ATTR_USER_DEFINED = 1 << 4,
  TOKEN_ATTR_BYTE = 1 << 5,
  TOKEN_ATTR_NORMALIZED = 1 << 6,
  TOKEN_ATTR_LSTRIP = 1 << 7,
  TOKEN_ATTR_RSTRIP = 1 << 8,
  TOKEN_ATTR_SINGLE_WORD = 1 << 9,
};

// GGUF tokenizer.ggml.token_type values.
enum TokenType : int32_t {
  TOKEN_TYPE_UNDEFINED = 0,
  TOKEN_TYPE_NORMAL = 1,
  TOKEN_TYPE_UNKNOWN = 2,
  TOKEN_TYPE_CONTROL = 3,
  TOKEN_TYPE_USER_DEFINED = 4,
  TOKEN_TYPE_UNUSED = 5,
  TOKEN_TYPE_BYTE = 6,
};

constexpr int32_t TOKEN_NULL = -1;

struct Vocab {
  std::string model;  // tokenizer.ggml.model: "llama" (SPM), "gpt2" (BPE), ...
  std::string pre;    // tokenizer.ggml.pre (may be empty)

  std::vector<float> scores;     // one per token (0 when the file has none)
  std::vector<int32_t> types;    // raw tokenizer.ggml.token_type (NORMAL when absent)
  std::vector<uint16_t> attrs;   // TokenAttr bits, after llama.cpp's overrides

  // Special ids; TOKEN_NULL when absent. Defaults follow llama.cpp per model
  // ("llama": bos 1, eos 2, unk 0; "gpt2": bos = eos = 11).
  int32_t bos = TOKEN_NULL, eos = TOKEN_NULL, eot = TOKEN_NULL, eom = TOKEN_NULL;
  int32_t unk = TOKEN_NULL, sep = TOKEN_NULL, pad = TOKEN_NULL, mask = TOKEN_NULL;
  int32_t fim_pre = TOKEN_NULL, fim_suf = TOKEN_NULL, fim_mid = TOKEN_NULL;
  int32_t fim_pad = TOKEN_NULL, fim_rep = TOKEN_NULL, fim_sep = TOKEN_NULL;

  bool add_bos = false, add_eos = false, add_sep = false;
  bool add_space_prefix = false;
  bool remove_extra_whitespaces = false;
  // llama.cpp's clean_up_tokenization_spaces: decoding drops the space before
  // ? ! . , and before 's 'm 're 've, and around a lone '. On for BPE
  // vocabularies except the pre-tokenizers that turn it off (qwen2 ...).
  bool clean_spaces = false;

  std::vector<int32_t> eog;  // end-of-generation ids, sorted ascending

  // Ids of CONTROL / USER_DEFINED / UNKNOWN tokens, longest text first, in
  // exactly llama.cpp's order (same std::sort, same comparator, same input),
  // which is the order the special-token splitter tries them in.
  std::vector<int32_t> special_tokens;

  // Builds from GGUF metadata. Throws weir::Error naming the file and the key
  // that is missing, ill-typed or of the wrong length.
  static Vocab from_gguf(const GGUFFile& f);

  // Builds from plain arrays (tests, synthetic vocabularies). scores and types
  // may be empty (all 0 / all NORMAL). Special ids, flags and general.name-based
  // rules are taken from `cfg`; EOG detection and attribute overrides run as for
  // a GGUF file.
  struct Config {
    std::string source = "<vocab>";  // names the origin in error messages
    std::string model = "llama";
    std::string pre;
    std::string general_name;  // "general.name" (phi-3 attribute rules)
    std::string general_arch;  // "general.architecture"
    // Unset: the model's default. Out-of-range ids keep the default, as in llama.cpp.
    std::optional<uint64_t> bos, eos, eot, eom, unk, sep, pad, mask;
    std::optional<uint64_t> fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    std::optional<bool> add_bos, add_eos, add_sep, add_space_prefix, remove_extra_whitespaces;
  };
  static Vocab from_arrays(std::span<const std::string_view> tokens, std::span<const float> scores,
                           std::span<const int32_t> types, const Config& cfg);

  int32_t n_tokens() const { return int32_t(offsets_.empty() ? 0 : offsets_.size() - 1); }
  bool valid(int32_t id) const { return id >= 0 && id < n_tokens(); }
  std::string_view text(int32_t id) const {
    return std::string_view(text_.data() + offsets_[size_t(id)],
                            offsets_[size_t(id) + 1] - offsets_[size_t(id)]);
  }
  // The id whose text is exactly `piece`, or TOKEN_NULL. When two tokens share
  // a text the later id wins (llama.cpp's token_to_id map does the same).
  int32_t find(std::string_view piece) const;
  // find() for many pieces at once (out[i] for pieces[i]), several times
  // faster on large batches: the lookups' cache misses overlap.
  void find_many(std::span<const std::string_view> pieces, int32_t* out) const;
  // The byte-fallback token for byte b: "<0xXX>", else the one-byte text,
  // else unk (TOKEN_NULL when there is none).
  int32_t byte_to_token(uint8_t b) const { return byte_tokens_[b]; }
  // The byte a BYTE token stands for ("<0x41>" -> 0x41); -1 if not a byte token.
  int byte_value(int32_t id) const;

  bool has_attr(int32_t id, uint16_t a) const { return (attrs[size_t(id)] & a) != 0; }
  bool is_control(int32_t id) const { return has_attr(id, TOKEN_ATTR_CONTROL); }
  bool is_eog(int32_t id) const;
  size_t max_token_len() const { return max_len_; }

 private:
  void build_index();
  int32_t find_hashed(std::string_view piece, uint64_t hash) const;
  void apply_llama_cpp_rules(const Config& cfg);

  std::string text_;               // all token texts, back to back
  std::vector<uint32_t> offsets_;  // n_tokens + 1 offsets into text_
  std::vector<uint64_t> table_;    // open addressing: hash tag << 32 | (id + 1); 0 = empty
  uint32_t mask_ = 0;              // table_.size() - 1
  size_t max_len_ = 0;
  int32_t byte_tokens_[256] = {};
};

}  // namespace weir
