// Splits text into the words (pre-tokens) that byte-level BPE merges within,
// as llama.cpp does for each tokenizer.ggml.pre: one regex, or a cascade of
// regexes each applied to the words of the one before. Text between matches
// is a word by itself, as in llama.cpp. The regexes are the models' own
// (tokenizer.json, in llama.cpp's form) and run on PCRE2 in UTF + UCP mode,
// so \p{L}, \p{N}, \p{Z} come from PCRE2's Unicode tables.
//
// Two adjustments keep the splits equal to the reference:
// - \s is rewritten to Unicode White_Space, [\t-\r\x{85}\p{Z}]: PCRE2's UCP
//   \s also matches U+180E, which HF tokenizers and llama.cpp do not.
// - Invalid UTF-8: llama.cpp decodes each byte that does not start a sequence
//   it accepts as U+FFFD. The regexes run on such a copy (one U+FFFD per bad
//   byte, or per accepted-but-ill-formed sequence), and the words map back to
//   the original bytes, so splits match llama.cpp's and no byte is lost.
#pragma once
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace weir {

struct WordSpan {
  uint32_t offset, length;  // bytes of the input text
};

class PreTokenizer {
 public:
  enum class Kind {
    Default,  // tokenizer.ggml.pre missing or "default": llama.cpp's 4-regex cascade
    Gpt2,     // "gpt-2" (and "gpt2", a spelling llama.cpp refuses)
    Llama3,   // "llama-bpe", "llama3", "llama-v3"
    Qwen2,    // "qwen2", "deepseek-r1-qwen"
  };

  // The kind for a tokenizer.ggml.pre value ("" when the key is missing:
  // llama.cpp then warns and uses its "default" cascade, and so does weir).
  // Throws weir::Error naming the key and the value when it is unknown, as
  // llama.cpp refuses such a file.
  static Kind kind_for(std::string_view pre);
  // The regexes of a kind, in llama.cpp's spelling (before the \s rewrite).
  static std::vector<std::string_view> patterns(Kind kind);
  static std::string_view name(Kind kind);

  explicit PreTokenizer(Kind kind);
  Kind kind() const { return kind_; }
  // llama.cpp's ignore_merges: a word that is a vocabulary token as a whole
  // is taken as is, without merging (llama3).
  bool ignore_merges() const { return kind_ == Kind::Llama3; }

  // Appends the words of `text` in order; together they cover every byte.
  // Thread-safe. Throws weir::Error only if PCRE2 itself fails.
  void split(std::string_view text, std::vector<WordSpan>& out) const;

 private:
  struct Regex;
  Kind kind_;
  std::vector<std::shared_ptr<const Regex>> regexes_;
};

}  // namespace weir
