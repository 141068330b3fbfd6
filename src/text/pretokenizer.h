// Splits text into the words (pre-tokens) that byte-level BPE merges within,
// as llama.cpp does for each tokenizer.ggml.pre: one regex, or a cascade of
// regexes each applied to the words of the one before. Text between matches
// is a word by itself, as in llama.cpp. The regexes are the models' own
// (tokenizer.json, in llama.cpp's form) and run on PCRE2 in UTF + UCP mode,
// so \p{L}, \p{N}, \p{Z} come from PCRE2's Unicode tables.
//
// Three adjustments keep the splits equal to the reference:
// - \s is rewritten to Unicode White_Space, [\t-\r\x{85}\p{Z}]: PCRE2's UCP
//   \s also matches U+180E, which HF tokenizers and llama.cpp do not.
// - A character class that lists non-ASCII characters (DeepSeek's CJK and
//   full-width ranges) never matches non-ASCII white space: llama.cpp runs
//   such regexes on text where that white space is U+000B, so U+3000 is not
//   in "[　-。]" there. $ matches only at the end of the word (llama.cpp's
//   std::regex), never before a final newline.
// - Invalid UTF-8: llama.cpp decodes each byte that does not start a sequence
//   it accepts as U+FFFD. The regexes run on such a copy (one U+FFFD per bad
//   byte, or per accepted-but-ill-formed sequence), and the words map back to
//   the original bytes, so splits match llama.cpp's and no byte is lost.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace weir {

struct WordSpan {
  uint32_t offset, length;  // bytes of the input text
};

class PreTokenizer {
 public:
  // A regex cascade (pretokenizer_kinds.cpp lists each one's regexes and
  // the tokenizer.ggml.pre names that choose it).
  enum class Kind {
    Default,        // tokenizer.ggml.pre missing or "default": llama.cpp's 4-regex cascade
    Gpt2,           // GPT-2's regex: "gpt-2", "mpt", "olmo", "phi-2" ...
    Llama3,         // "llama-bpe", "llama3", "dbrx", "glm4" ...
    Qwen2,          // "qwen2", "deepseek-r1-qwen", "stablelm2" ...
    Falcon,         // "falcon"
    Starcoder,      // "starcoder", "refact", "command-r", "smollm" ...
    DeepseekLlm,    // "deepseek-llm"
    DeepseekCoder,  // "deepseek-coder"
  };
  // One tokenizer.ggml.pre value: its cascade, and llama.cpp's ignore_merges
  // (a word that is a vocabulary token as a whole is taken as is, without
  // merging: llama3 and the names that share it, not dbrx or glm4).
  struct Name {
    std::string_view pre;
    Kind kind;
    bool ignore_merges;
  };
  // Every name weir knows, as llama.cpp maps them.
  static std::span<const Name> known_names();
  // The entry of a tokenizer.ggml.pre value ("" when the key is missing:
  // llama.cpp then warns and uses its "default" cascade, and so does weir).
  // Throws weir::Error naming the key and the value, and listing the known
  // names, when it is unknown, as llama.cpp refuses such a file.
  static Name lookup(std::string_view pre);
  static Kind kind_for(std::string_view pre) { return lookup(pre).kind; }
  // The regexes of a kind, in llama.cpp's spelling (non-ASCII characters as
  // \x{...}), before the rewrites above.
  static std::vector<std::string_view> patterns(Kind kind);
  static std::string_view name(Kind kind);

  explicit PreTokenizer(Kind kind, bool ignore_merges = false);
  explicit PreTokenizer(const Name& n) : PreTokenizer(n.kind, n.ignore_merges) {}
  Kind kind() const { return kind_; }
  bool ignore_merges() const { return ignore_merges_; }

  // Appends the words of `text` in order; together they cover every byte.
  // Thread-safe. Throws weir::Error only if PCRE2 itself fails.
  void split(std::string_view text, std::vector<WordSpan>& out) const;

 private:
  struct Regex;
  Kind kind_;
  bool ignore_merges_;
  std::vector<std::shared_ptr<const Regex>> regexes_;
};

}  // namespace weir
