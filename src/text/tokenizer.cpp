#include "text/tokenizer.h"

#include <cstdio>

#include "core/error.h"
#include "core/gguf.h"
#include "core/warn.h"
#include "text/bpe_tokenizer.h"
#include "text/spm_tokenizer.h"
#include "text/wpm_tokenizer.h"

namespace weir {

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  if (!vocab_.valid(id))
    throw Error("token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                std::to_string(vocab_.n_tokens() - 1) + ")");
  const uint16_t a = vocab_.attrs[size_t(id)];
  constexpr uint16_t kSpecial = TOKEN_ATTR_UNKNOWN | TOKEN_ATTR_CONTROL;
  if (!render_special && (a & kSpecial)) return {};
  const std::string_view t = vocab_.text(id);
  if (a & (kSpecial | TOKEN_ATTR_USER_DEFINED)) return std::string(t);
  if (a & TOKEN_ATTR_NORMAL) return normal_piece(t);
  if (a & TOKEN_ATTR_BYTE) {
    const int b = vocab_.byte_value(id);
    return b < 0 ? std::string() : std::string(1, char(b));
  }
  return {};  // UNUSED, UNDEFINED: llama.cpp renders nothing
}

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
  return vocab_.clean_spaces ? clean_up_spaces(out) : out;
}

// Three passes, each reading the previous one's output, as llama.cpp's
// detokenize does in place.
std::string clean_up_spaces(std::string_view text) {
  std::string a(text), b;
  // Pass 1: " ?", " !", " .", " ," -> drop the space.
  b.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const char x = a[i];
    if (i > 0 && a[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ','))
      b.pop_back();
    b.push_back(x);
  }
  // Pass 2: " ' " -> "'". The dropped right space reads as NUL afterwards,
  // so it never counts as the space before the next character.
  a.clear();
  for (size_t i = 0; i < b.size(); ++i) {
    const char x = b[i];
    if (i > 0 && x == '\'' && i + 1 < b.size() && b[i - 1] == ' ' && b[i + 1] == ' ') {
      a.pop_back();
      b[++i] = '\0';
    }
    a.push_back(x);
  }
  // Pass 3: " 's", " 'm", " 're", " 've" -> drop the space.
  b.clear();
  for (size_t i = 0; i < a.size(); ++i) {
    const char x = a[i];
    if (i > 0 && a[i - 1] == ' ' && x == '\'' && i + 1 < a.size()) {
      const char x1 = a[i + 1];
      const char x2 = i + 2 < a.size() ? a[i + 2] : '\0';
      if (x1 == 's' || x1 == 'm' ||
          (i + 2 < a.size() && ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e'))))
        b.pop_back();
    }
    b.push_back(x);
  }
  return b;
}

constexpr const char* kSupported =
    " (supported: \"llama\" (SentencePiece), \"gpt2\" (BPE), \"bert\" (WordPiece))";

std::unique_ptr<Tokenizer> Tokenizer::from_vocab(Vocab vocab) {
  if (vocab.model == "llama") return std::make_unique<SpmTokenizer>(std::move(vocab));
  if (vocab.model == "bert") return std::make_unique<WpmTokenizer>(std::move(vocab));
  if (vocab.model == "gpt2")
    throw Error("tokenizer.ggml.model \"gpt2\" (BPE) needs its merges: build it with "
                "Tokenizer::from_gguf or BpeTokenizer");
  throw Error("tokenizer.ggml.model \"" + vocab.model + "\" is not supported" + kSupported);
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GGUFFile& f) {
  const std::string_view model = f.get_str("tokenizer.ggml.model");
  if (model == "llama" || model == "bert") {
    Vocab vocab = Vocab::from_gguf(f);
    try {
      return from_vocab(std::move(vocab));
    } catch (const Error& e) {
      throw Error(f.name() + ": " + e.what());
    }
  }
  if (model == "gpt2") {
    const std::string_view pre = f.get_str_or("tokenizer.ggml.pre", "");
    try {
      (void)PreTokenizer::kind_for(pre);
    } catch (const Error& e) {
      throw Error(f.name() + ": " + e.what());
    }
    // llama.cpp's words for the same case.
    if (pre.empty())
      warn(f.name() + ": no tokenizer.ggml.pre; using llama.cpp's \"default\" BPE pre-tokenizer "
           "(generation quality may be degraded)");
    return std::make_unique<BpeTokenizer>(Vocab::from_gguf(f),
                                          f.get_str_array("tokenizer.ggml.merges"));
  }
  throw Error(f.name() + ": tokenizer.ggml.model \"" + std::string(model) + "\" is not supported" +
              kSupported);
}

}  // namespace weir
