#include "text/wpm_tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "text/unicode_props.h"

namespace weir {

namespace {

constexpr std::string_view kWordStartMark = "\xe2\x96\x81";  // U+2581
constexpr char32_t kReplacementChar = 0xFFFD;

// The code point at s[i], advancing i past it, as llama.cpp's
// unicode_cpts_from_utf8 reads it: a lead byte with all its continuation
// bytes is a code point (overlong forms and surrogates included); any other
// byte is U+FFFD by itself.
char32_t read_code_point_as_llama_cpp(std::string_view s, size_t& i) {
  const uint8_t b0 = uint8_t(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  size_t n = 0;
  if ((b0 & 0xE0) == 0xC0) n = 2;
  else if ((b0 & 0xF0) == 0xE0) n = 3;
  else if ((b0 & 0xF8) == 0xF0) n = 4;
  if (n == 0 || i + n > s.size()) {
    ++i;
    return kReplacementChar;
  }
  char32_t cp = b0 & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    const uint8_t b = uint8_t(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return kReplacementChar;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  i += n;
  return cp;
}

void append_code_point_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

// The CJK ideograph blocks BERT puts spaces around (HF tokenizers' ranges,
// which llama.cpp copies, Extension C/D's start included).
bool is_cjk_ideograph(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

}  // namespace

WpmTokenizer::WpmTokenizer(Vocab vocab) : Tokenizer(std::move(vocab)), splitter_(vocab_) {
  if (!vocab_.valid(vocab_.unk))
    throw Error("WordPiece tokenizer: the vocabulary has no unknown token "
                "(tokenizer.ggml.unknown_token_id is " + std::to_string(vocab_.unk) + ", " +
                std::to_string(vocab_.n_tokens()) + " tokens)");
}

std::vector<std::string> WpmTokenizer::split_words(std::string_view text) {
  std::vector<std::string> words;
  std::string word;
  auto finish = [&] {
    if (!word.empty()) words.push_back(std::move(word));
    word.clear();
  };
  for (size_t i = 0; i < text.size();) {
    const char32_t cp = unicode::nfd_first(read_code_point_as_llama_cpp(text, i));
    if (unicode::is_white_space(cp)) {
      finish();
      continue;
    }
    const unicode::Category cat = unicode::category(cp);
    if (cp == 0 || cp == kReplacementChar || cp > 0x10FFFF || cat == unicode::Category::Control)
      continue;
    if (cat == unicode::Category::Punctuation || (cp < 0x7F && cat == unicode::Category::Symbol) ||
        is_cjk_ideograph(cp)) {
      finish();
      append_code_point_utf8(word, unicode::to_lower(cp));
      finish();
    } else {
      append_code_point_utf8(word, unicode::to_lower(cp));
    }
  }
  finish();
  return words;
}

void WpmTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  std::string w;
  w.reserve(kWordStartMark.size() + word.size());
  w.append(kWordStartMark).append(word);
  const size_t first = out.size();
  const size_t max_len = vocab_.max_token_len();
  // Longest piece first, left to right, on bytes (every piece is whole UTF-8,
  // so only whole code points match).
  for (size_t i = 0; i < w.size();) {
    size_t j = std::min(w.size(), i + max_len);
    int32_t id = TOKEN_NULL;
    for (; j > i; --j)
      if ((id = vocab_.find(std::string_view(w).substr(i, j - i))) != TOKEN_NULL) break;
    if (id == TOKEN_NULL) {  // the word cannot be cut to its end: all of it is unknown
      out.resize(first);
      break;
    }
    out.push_back(id);
    i = j;
  }
  if (out.size() == first) out.push_back(vocab_.unk);
}

std::vector<int32_t> WpmTokenizer::encode(std::string_view text, bool add_special,
                                          bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 4 + 4);
  if (add_special && vocab_.add_bos) {
    if (vocab_.bos == TOKEN_NULL)
      throw Error("tokenizer: the vocabulary adds [CLS] (BOS) but has no BOS id");
    out.push_back(vocab_.bos);
  }
  for (const TextFragment& f : splitter_.split(text, parse_special)) {
    if (f.is_token()) {
      out.push_back(f.token);
      continue;
    }
    for (const std::string& word : split_words(text.substr(f.offset, f.length)))
      encode_word(word, out);
  }
  if (add_special && vocab_.add_sep) {
    if (vocab_.sep == TOKEN_NULL)
      throw Error("tokenizer: the vocabulary adds [SEP] but has no separator id");
    out.push_back(vocab_.sep);
  }
  return out;
}

std::string WpmTokenizer::normal_piece(std::string_view t) const {
  std::string out;
  out.reserve(t.size());
  size_t start = 0;
  for (size_t p; (p = t.find(kWordStartMark, start)) != std::string_view::npos;
       start = p + kWordStartMark.size()) {
    out.append(t.data() + start, p - start);
    out.push_back(' ');
  }
  out.append(t.data() + start, t.size() - start);
  return out;
}

}  // namespace weir
