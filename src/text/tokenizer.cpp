#include "text/tokenizer.h"

#include "core/error.h"
#include "core/gguf.h"
#include "text/spm_tokenizer.h"

namespace weir {

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string piece = token_to_piece(ids[i], render_special);
    // llama.cpp strips one leading space from the first token only (its
    // lstrip), whatever that token is.
    if (i == 0 && vocab_.add_space_prefix && !piece.empty() && piece[0] == ' ')
      out.append(piece, 1, std::string::npos);
    else
      out += piece;
  }
  return out;
}

std::unique_ptr<Tokenizer> Tokenizer::from_vocab(Vocab vocab) {
  if (vocab.model == "llama") return std::make_unique<SpmTokenizer>(std::move(vocab));
  throw Error("tokenizer.ggml.model \"" + vocab.model +
              "\" is not supported (supported: \"llama\" (SentencePiece))");
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GGUFFile& f) {
  const std::string_view model = f.get_str("tokenizer.ggml.model");
  if (model != "llama")
    throw Error(f.name() + ": tokenizer.ggml.model \"" + std::string(model) +
                "\" is not supported (supported: \"llama\" (SentencePiece))");
  return from_vocab(Vocab::from_gguf(f));
}

}  // namespace weir
