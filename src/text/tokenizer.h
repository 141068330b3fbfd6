// Text <-> token ids, built from a GGUF vocabulary. One implementation per
// tokenizer.ggml.model: "llama" -> SentencePiece (SpmTokenizer), "gpt2" ->
// byte-level BPE (BpeTokenizer), "bert" -> WordPiece (WpmTokenizer). Results
// match llama.cpp's llama_tokenize / llama_token_to_piece / llama_detokenize.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "text/vocab.h"

namespace weir {

class GGUFFile;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text` (any bytes; invalid UTF-8 is tokenized, never an
  // error). add_special is llama.cpp's add_special: it adds BOS when the vocab
  // says add_bos (and EOS when add_eos). parse_special: control tokens written
  // in the text ("<start_of_turn>", "<bos>") become their ids; without it they
  // are tokenized as plain text. USER_DEFINED tokens are matched either way.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special,
                                      bool parse_special) const = 0;

  // The bytes one token stands for. Control and unknown tokens give "" unless
  // render_special. A piece can be part of a UTF-8 sequence (byte tokens):
  // use Utf8Streamer when printing pieces one at a time.
  // Throws weir::Error for an id outside the vocabulary.
  std::string token_to_piece(int32_t id, bool render_special = false) const;

  // The text of a token sequence (llama.cpp's detokenize with remove_special
  // off): the pieces joined; when the vocab adds a space prefix, one leading
  // space of the first piece is dropped; with vocab.clean_spaces the
  // clean_up_spaces rules apply.
  virtual std::string decode(std::span<const int32_t> ids, bool render_special = false) const;

  const Vocab& vocab() const { return vocab_; }

  // Picks the implementation from tokenizer.ggml.model; throws weir::Error
  // naming the key for a model it does not know.
  static std::unique_ptr<Tokenizer> from_gguf(const GGUFFile& f);
  // SentencePiece and WordPiece: BPE needs its merges too (BpeTokenizer).
  static std::unique_ptr<Tokenizer> from_vocab(Vocab vocab);

 protected:
  explicit Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}
  // The text of a NORMAL token, decoded from the model's piece alphabet
  // (SentencePiece's U+2581 spaces, GPT-2's byte-level characters).
  virtual std::string normal_piece(std::string_view text) const = 0;
  Vocab vocab_;
};

// llama.cpp's clean-up of decoded text (clean_up_tokenization_spaces), byte
// for byte: " ?", " !", " .", " ," lose the space; " ' " becomes "'"; " 's",
// " 'm", " 're", " 've" lose the space (" 't", " 'd", " 'll" keep it).
std::string clean_up_spaces(std::string_view text);

}  // namespace weir
