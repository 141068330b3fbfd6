#include "text/spm_tokenizer.h"

#include <queue>

#include "core/error.h"

namespace weir {

namespace {

constexpr std::string_view kSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's space

// The length of the character at s[off]: llama.cpp's unicode_len_utf8 (the
// length its lead byte announces), but only when the continuation bytes are
// there; otherwise the lead byte is a character by itself. On valid UTF-8
// this is llama.cpp's split. On invalid UTF-8 llama.cpp lets a bad lead byte
// swallow the next 1-3 bytes whatever they are (an escaped space included,
// which then decodes as U+2581); we keep those bytes apart, so every input
// decodes back to itself.
inline uint32_t char_len(std::string_view s, uint32_t off) {
  static constexpr uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  const uint32_t len = lookup[uint8_t(s[off]) >> 4];
  if (len == 1 || off + len > s.size()) return 1;
  for (uint32_t k = 1; k < len; ++k)
    if ((uint8_t(s[off + k]) & 0xC0) != 0x80) return 1;
  return len;
}

struct Symbol {
  int32_t prev, next;
  uint32_t off, n;  // n == 0: merged into its left neighbour
  int32_t id;       // its token once merged; kUnknown: not looked up yet
};
constexpr int32_t kUnknown = -2;

struct Bigram {
  int32_t left, right;
  float score;
  uint32_t size;
  int32_t id;  // the token the pair makes
};

// Best score first; on equal scores the leftmost pair first (llama.cpp's
// llm_bigram_spm::comparator).
struct BigramLess {
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  }
};

void append_escaped(std::string& out, std::string_view text) {
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == ' ') {
      out.append(text.data() + start, i - start);
      out.append(kSpace);
      start = i + 1;
    }
  }
  out.append(text.data() + start, text.size() - start);
}

// SentencePiece merges on an escaped fragment.
void spm_merge(const Vocab& vocab, std::string_view s, std::vector<int32_t>& out) {
  if (s.empty()) return;
  std::vector<Symbol> sym;
  sym.reserve(s.size());
  for (uint32_t off = 0; off < s.size();) {
    const uint32_t n = char_len(s, off);
    const int32_t i = int32_t(sym.size());
    sym.push_back({i - 1, off + n == s.size() ? -1 : i + 1, off, n, kUnknown});
    off += n;
  }

  std::vector<Bigram> storage;
  storage.reserve(sym.size());
  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue(BigramLess{},
                                                                     std::move(storage));
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t size = sym[size_t(left)].n + sym[size_t(right)].n;
    const int32_t id = vocab.find(s.substr(sym[size_t(left)].off, size));
    if (id == TOKEN_NULL) return;
    queue.push({left, right, vocab.scores[size_t(id)], size, id});
  };
  for (int32_t i = 1; i < int32_t(sym.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[size_t(b.left)];
    Symbol& r = sym[size_t(b.right)];
    // Stale: one side was merged since this pair was queued.
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
    l.n += r.n;
    l.id = b.id;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[size_t(r.next)].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  // Every merged symbol is a vocabulary token (a pair is queued only when its
  // text is one), so llama.cpp's resegment through the merge history never
  // fires: a symbol is its token or, a single character missing from the
  // vocabulary, its bytes.
  for (int32_t i = 0; i != -1; i = sym[size_t(i)].next) {
    const Symbol& x = sym[size_t(i)];
    const std::string_view piece = s.substr(x.off, x.n);
    const int32_t id = x.id != kUnknown ? x.id : vocab.find(piece);
    if (id != TOKEN_NULL) {
      out.push_back(id);
      continue;
    }
    for (char c : piece) {
      const int32_t bt = vocab.byte_to_token(uint8_t(c));
      if (bt != TOKEN_NULL) out.push_back(bt);
    }
  }
}

}  // namespace

SpmTokenizer::SpmTokenizer(Vocab vocab) : Tokenizer(std::move(vocab)), splitter_(vocab_) {}

void SpmTokenizer::encode_fragment(std::string_view text, std::vector<int32_t>& out) const {
  std::string s;
  s.reserve(text.size() + 16);
  append_escaped(s, text);
  spm_merge(vocab_, s, out);
}

std::vector<int32_t> SpmTokenizer::encode(std::string_view text, bool add_special,
                                          bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && vocab_.add_bos) {
    if (vocab_.bos == TOKEN_NULL) throw Error("tokenizer: the vocabulary adds BOS but has no BOS id");
    out.push_back(vocab_.bos);
  }
  bool prev_special = true;  // the first fragment gets the space prefix too
  std::string s;
  for (const TextFragment& f : splitter_.split(text, parse_special)) {
    if (f.is_token()) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    s.clear();
    if (vocab_.add_space_prefix && prev_special) s.append(kSpace);
    append_escaped(s, text.substr(f.offset, f.length));
    spm_merge(vocab_, s, out);
    prev_special = false;
  }
  if (add_special && vocab_.add_eos) {
    if (vocab_.eos == TOKEN_NULL) throw Error("tokenizer: the vocabulary adds EOS but has no EOS id");
    out.push_back(vocab_.eos);
  }
  return out;
}

std::string SpmTokenizer::normal_piece(std::string_view t) const {
  std::string out;
  out.reserve(t.size());
  size_t start = 0;
  for (size_t p; (p = t.find(kSpace, start)) != std::string_view::npos; start = p + kSpace.size()) {
    out.append(t.data() + start, p - start);
    out.push_back(' ');
  }
  out.append(t.data() + start, t.size() - start);
  return out;
}

}  // namespace weir
