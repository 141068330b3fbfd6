// SentencePiece (tokenizer.ggml.model = "llama") tokenizer, matching
// llama.cpp's llm_tokenizer_spm:
// 1. special tokens are split off first (SpecialSplitter);
// 2. each raw fragment gets a ' ' prefix when add_space_prefix is set and the
//    fragment is first or follows a special token, then ' ' -> U+2581;
// 3. the fragment is cut into UTF-8 characters; a byte that does not start a
//    complete sequence (lead byte plus its continuation bytes) is a character
//    by itself (llama.cpp differs here, on invalid UTF-8 only: see char_len);
// 4. adjacent symbols whose concatenation is a vocabulary token are merged,
//    best score first, leftmost first on ties, until no pair merges;
// 5. each final symbol is its token, or, when it is not in the vocabulary
//    (only single characters can be), one byte token <0xXX> per byte.
// No normalisation: the text is used byte for byte.
#pragma once
#include "text/special_split.h"
#include "text/tokenizer.h"

namespace weir {

class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(Vocab vocab);

  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special) const override;


  // SentencePiece on one raw fragment (no special-token splitting, no BOS);
  // appends to out. `text` is used as is: spaces are escaped here, but no
  // space prefix is added.
  void encode_fragment(std::string_view text, std::vector<int32_t>& out) const;

 private:
  std::string normal_piece(std::string_view text) const override;
  SpecialSplitter splitter_;
};

}  // namespace weir
