// Byte-level BPE (tokenizer.ggml.model = "gpt2"), matching llama.cpp's
// llm_tokenizer_bpe:
// 1. special tokens are split off first (SpecialSplitter);
// 2. each raw fragment is cut into words by the pre-tokenizer that
//    tokenizer.ggml.pre names (PreTokenizer);
// 3. in each word every byte starts as one symbol (its GPT-2 byte-level
//    character); adjacent symbols are merged by tokenizer.ggml.merges, lowest
//    rank (index) first, leftmost first on ties, until no pair has a rank;
//    with ignore_merges (llama3 and the names that share it) a word that is
//    a token as a whole is taken as is;
// 4. each symbol is its token; a symbol that is not a token (only with a
//    vocabulary whose merges make non-tokens) becomes one token per byte.
// Invalid UTF-8 is tokenized byte for byte, so every input decodes back to
// itself (llama.cpp turns such bytes into U+FFFD).
#pragma once
#include <span>
#include <string_view>
#include <vector>

#include "text/pretokenizer.h"
#include "text/special_split.h"
#include "text/tokenizer.h"

namespace weir {

class BpeTokenizer final : public Tokenizer {
 public:
  // merges: "left right" strings, rank = index (tokenizer.ggml.merges).
  // Throws weir::Error for an unknown tokenizer.ggml.pre (vocab.pre).
  BpeTokenizer(Vocab vocab, std::span<const std::string_view> merges);

  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special) const override;

  const PreTokenizer& pretokenizer() const { return pre_; }
  // BPE on one word of raw bytes (no pre-tokenizing, no specials); appends to out.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  size_t n_merges() const { return n_merges_; }

 private:
  std::string normal_piece(std::string_view text) const override;
  struct Merge {
    uint64_t key;    // left symbol << 32 | right symbol; kEmpty: free slot
    int32_t rank;
    int32_t result;  // symbol of the merged text, -1 if it is not a known text
  };
  static constexpr uint64_t kEmpty = ~0ull;
  const Merge* find_merge(int32_t left, int32_t right) const;
  void build_merges(std::span<const std::string_view> merges);

  PreTokenizer pre_;
  SpecialSplitter splitter_;
  // Symbols are token ids, or ids >= n_tokens for texts that merges name but
  // the vocabulary lacks. byte_symbol_[b]: the symbol of byte b's character.
  int32_t byte_symbol_[256];
  std::vector<Merge> merges_;  // open addressing on key
  uint64_t merges_mask_ = 0;
  size_t n_merges_ = 0;
};

}  // namespace weir
