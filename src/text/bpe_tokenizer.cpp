#include "text/bpe_tokenizer.h"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "text/byte_unicode.h"

namespace weir {

namespace {

inline uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

inline uint64_t pair_key(int32_t l, int32_t r) { return uint64_t(uint32_t(l)) << 32 | uint32_t(r); }

struct Symbol {
  int32_t prev, next;
  uint32_t off, n;  // n == 0: merged into its left neighbour
  int32_t sym;      // token id (or merges-only id); -1: a text no merge names
};

struct Bigram {
  int32_t rank;
  int32_t left, right;
  uint32_t size;
  int32_t result;  // the merged symbol
};

// Lowest rank first; on equal ranks the leftmost pair (llama.cpp's
// llm_bigram_bpe::comparator).
struct BigramAfter {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

// C-locale lenient UTF-8 decode of one code point, as llama.cpp's
// unicode_cpt_from_utf8 (no check for overlong forms or surrogates); an
// invalid byte gives U+FFFD and length 1.
uint32_t decode_lenient(std::string_view s, size_t i, size_t& len) {
  const uint8_t c = uint8_t(s[i]);
  len = 1;
  if (c < 0x80) return c;
  if (!(c & 0x40)) return 0xFFFD;
  const size_t n = !(c & 0x20) ? 2 : !(c & 0x10) ? 3 : !(c & 0x08) ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0xFFFD;
  uint32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    const uint8_t x = uint8_t(s[i + k]);
    if ((x & 0xC0) != 0x80) return 0xFFFD;
    cp = cp << 6 | (x & 0x3F);
  }
  len = n;
  return cp;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | cp >> 6));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | cp >> 12));
    out.push_back(char(0x80 | (cp >> 6 & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18 & 0x07)));
    out.push_back(char(0x80 | (cp >> 12 & 0x3F)));
    out.push_back(char(0x80 | (cp >> 6 & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

// Byte-level text -> bytes (llama.cpp's llama_decode_text): a character
// outside the byte alphabet is written as "[UNK_BYTE_0x<its UTF-8 in hex><text>]".
std::string decode_byte_level(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0, len = 0; i < text.size(); i += len) {
    const uint32_t cp = decode_lenient(text, i, len);
    const int b = unicode_to_byte(cp);
    if (b >= 0) {
      out.push_back(char(b));
      continue;
    }
    std::string utf8;
    append_utf8(utf8, cp);
    static const char* hex = "0123456789abcdef";
    out += "[UNK_BYTE_0x";
    for (unsigned char c : utf8) {
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
    out.append(text);
    out += "]";
  }
  return out;
}

// Where llama.cpp splits a merge: at the first space after the first byte.
// npos when that leaves an empty side (llama.cpp then ranks a pair with ""
// in it, which no symbol ever is).
size_t merge_split(std::string_view m) {
  if (m.size() < 3) return std::string_view::npos;
  const size_t sp = m.find(' ', 1);
  return sp == std::string_view::npos || sp + 1 == m.size() ? std::string_view::npos : sp;
}

}  // namespace

BpeTokenizer::BpeTokenizer(Vocab vocab, std::span<const std::string_view> merges)
    : Tokenizer(std::move(vocab)),
      pre_(PreTokenizer::lookup(vocab_.pre)),
      splitter_(vocab_) {
  build_merges(merges);
}

void BpeTokenizer::build_merges(std::span<const std::string_view> merges) {
  const int32_t n_tok = vocab_.n_tokens();
  // Texts that merges name but the vocabulary lacks get ids from n_tok on,
  // so merges through them happen as in llama.cpp (which keys its ranks by
  // text). Real vocabularies have none.
  std::unordered_map<std::string, int32_t> extra;
  auto extra_of = [&](std::string_view t, bool create) -> int32_t {
    const auto it = extra.find(std::string(t));
    if (it != extra.end()) return it->second;
    if (!create) return -1;
    const int32_t id = n_tok + int32_t(extra.size());
    extra.emplace(std::string(t), id);
    return id;
  };

  uint64_t cap = 16;
  while (cap * 3 < uint64_t(merges.size()) * 5) cap <<= 1;  // load <= 0.6
  merges_.assign(cap, Merge{kEmpty, 0, 0});
  merges_mask_ = cap - 1;
  n_merges_ = 0;

  // In chunks: both sides and the joined text of each merge are looked up
  // as batches (Vocab::find_many), then inserted in rank order, so the first
  // occurrence of a pair keeps its rank.
  constexpr size_t kChunk = 4096;
  std::vector<std::string_view> left, right, joined;
  std::vector<int32_t> lid(kChunk), rid(kChunk), jid(kChunk);
  std::vector<size_t> at(kChunk);
  std::string buf;
  for (size_t c0 = 0; c0 < merges.size(); c0 += kChunk) {
    const size_t n = std::min(kChunk, merges.size() - c0);
    left.assign(n, {});
    right.assign(n, {});
    joined.assign(n, {});
    buf.clear();
    for (size_t i = 0; i < n; ++i) {
      const std::string_view m = merges[c0 + i];
      const size_t sp = merge_split(m);
      if (sp == std::string_view::npos) continue;
      left[i] = m.substr(0, sp);
      right[i] = m.substr(sp + 1);
      at[i] = buf.size();
      buf.append(left[i]).append(right[i]);
    }
    for (size_t i = 0; i < n; ++i)
      if (!left[i].empty()) joined[i] = std::string_view(buf).substr(at[i], left[i].size() + right[i].size());
    vocab_.find_many(left, lid.data());
    vocab_.find_many(right, rid.data());
    vocab_.find_many(joined, jid.data());
    for (size_t i = 0; i < n; ++i) {
      if (left[i].empty()) continue;
      if (lid[i] == TOKEN_NULL) lid[i] = extra_of(left[i], true);
      if (rid[i] == TOKEN_NULL) rid[i] = extra_of(right[i], true);
      const uint64_t key = pair_key(lid[i], rid[i]);
      uint64_t s = mix(key) & merges_mask_;
      while (merges_[s].key != kEmpty && merges_[s].key != key) s = (s + 1) & merges_mask_;
      if (merges_[s].key == key) continue;
      merges_[s] = Merge{key, int32_t(c0 + i), jid[i] == TOKEN_NULL ? -1 : jid[i]};
      ++n_merges_;
    }
  }

  for (int b = 0; b < 256; ++b) {
    const std::string_view t = byte_to_unicode(uint8_t(b));
    const int32_t id = vocab_.find(t);
    byte_symbol_[b] = id != TOKEN_NULL ? id : extra_of(t, false);
  }
  // A merge whose text is no token may still make a text that later merges
  // name; only known once every merge has been read.
  if (!extra.empty()) {
    for (Merge& m : merges_) {
      if (m.key == kEmpty || m.result >= 0) continue;
      const std::string_view t = merges[size_t(m.rank)];
      const size_t sp = merge_split(t);
      m.result = extra_of(std::string(t.substr(0, sp)) + std::string(t.substr(sp + 1)), false);
    }
  }
}

const BpeTokenizer::Merge* BpeTokenizer::find_merge(int32_t left, int32_t right) const {
  if (left < 0 || right < 0) return nullptr;
  const uint64_t key = pair_key(left, right);
  for (uint64_t s = mix(key) & merges_mask_;; s = (s + 1) & merges_mask_) {
    const Merge& m = merges_[s];
    if (m.key == key) return &m;
    if (m.key == kEmpty) return nullptr;
  }
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  const int32_t n_tok = vocab_.n_tokens();
  auto emit = [&](int32_t sym, std::string_view bytes) {
    if (sym >= 0 && sym < n_tok) {
      out.push_back(sym);
      return;
    }
    // Not a token: one token per byte (lossless where llama.cpp looks up
    // single bytes of the byte-level text; both only with odd vocabularies).
    for (char c : bytes) {
      const int32_t t = byte_symbol_[uint8_t(c)];
      if (t >= 0 && t < n_tok) out.push_back(t);
    }
  };

  if (pre_.ignore_merges()) {
    std::string text;
    append_byte_level(text, word);
    const int32_t id = vocab_.find(text);
    if (id != TOKEN_NULL) {
      out.push_back(id);
      return;
    }
  }
  if (word.size() == 1) {
    emit(byte_symbol_[uint8_t(word[0])], word);
    return;
  }

  thread_local std::vector<Symbol> sym;
  thread_local std::vector<Bigram> heap;
  sym.clear();
  heap.clear();
  const int32_t n = int32_t(word.size());
  for (int32_t i = 0; i < n; ++i)
    sym.push_back({i - 1, i + 1 == n ? -1 : i + 1, uint32_t(i), 1, byte_symbol_[uint8_t(word[i])]});

  auto try_add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const Merge* m = find_merge(sym[size_t(l)].sym, sym[size_t(r)].sym);
    if (!m) return;
    heap.push_back({m->rank, l, r, sym[size_t(l)].n + sym[size_t(r)].n, m->result});
    std::push_heap(heap.begin(), heap.end(), BigramAfter{});
  };
  for (int32_t i = 1; i < n; ++i) try_add(i - 1, i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), BigramAfter{});
    const Bigram b = heap.back();
    heap.pop_back();
    Symbol& l = sym[size_t(b.left)];
    Symbol& r = sym[size_t(b.right)];
    // Stale: a side was merged since. Texts are contiguous, so the pair's
    // text is unchanged exactly when both are alive and its size is.
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
    l.sym = b.result;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[size_t(r.next)].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  for (int32_t i = 0; i != -1; i = sym[size_t(i)].next)
    emit(sym[size_t(i)].sym, word.substr(sym[size_t(i)].off, sym[size_t(i)].n));
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool add_special,
                                          bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && vocab_.add_bos) {
    if (vocab_.bos == TOKEN_NULL) throw Error("tokenizer: the vocabulary adds BOS but has no BOS id");
    out.push_back(vocab_.bos);
  }
  std::vector<WordSpan> words;
  for (const TextFragment& f : splitter_.split(text, parse_special)) {
    if (f.is_token()) {
      out.push_back(f.token);
      continue;
    }
    const std::string_view frag = text.substr(f.offset, f.length);
    words.clear();
    pre_.split(frag, words);
    for (const WordSpan& w : words) encode_word(frag.substr(w.offset, w.length), out);
  }
  if (add_special && vocab_.add_eos) {
    if (vocab_.eos == TOKEN_NULL) throw Error("tokenizer: the vocabulary adds EOS but has no EOS id");
    out.push_back(vocab_.eos);
  }
  return out;
}

std::string BpeTokenizer::normal_piece(std::string_view text) const { return decode_byte_level(text); }

}  // namespace weir
