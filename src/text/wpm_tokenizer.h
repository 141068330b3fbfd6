// WordPiece (tokenizer.ggml.model = "bert"), matching llama.cpp's
// llm_tokenizer_wpm:
// 1. special tokens are split off first (SpecialSplitter);
// 2. each raw fragment is normalized and cut into words (split_words), code
//    point by code point: each is replaced by the first code point of its NFD
//    decomposition (so 'é' -> 'e': the accent goes) and then classified:
//    - White_Space ends the current word;
//    - U+0000, U+FFFD and controls (Cc, Cf, Co, Cs) are dropped;
//    - punctuation (P*), ASCII symbols (S* below U+007F: $ + < = > ^ ` | ~)
//      and CJK ideographs are words of their own;
//    - anything else, lower-cased, joins the current word;
// 3. each word, with the word-start mark U+2581 in front, is cut greedily
//    from the left into the longest vocabulary texts (the GGUF converter
//    wrote BERT's word-start pieces as "▁the" and its "##ing" pieces as
//    "ing"); a word that cannot be cut to the end becomes one [UNK].
// add_special puts [CLS] (bos) in front when add_bos is set and [SEP] at the
// end when add_sep is set. Decoding turns U+2581 back into spaces, so the text
// of a sequence starts with a space.
//
// Invalid UTF-8 is read as llama.cpp reads it (a byte that does not start a
// sequence it accepts is U+FFFD, and dropped); a 4-byte sequence past
// U+10FFFF is dropped as well, where llama.cpp throws.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "text/special_split.h"
#include "text/tokenizer.h"

namespace weir {

class WpmTokenizer final : public Tokenizer {
 public:
  // Throws weir::Error when the vocabulary has no unknown token.
  explicit WpmTokenizer(Vocab vocab);

  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special) const override;

  // Step 2 on one raw fragment: its normalized words, in order.
  static std::vector<std::string> split_words(std::string_view text);
  // Step 3 on one normalized word (no U+2581 in front yet); appends to out.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

 private:
  std::string normal_piece(std::string_view text) const override;
  SpecialSplitter splitter_;
};

}  // namespace weir
