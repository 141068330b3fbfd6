#include "text/special_split.h"

#include <algorithm>

#include "core/error.h"
#include "text/vocab.h"

namespace weir {

namespace {
// C isspace() in the "C" locale, as llama.cpp's LSTRIP / RSTRIP use it.
inline bool c_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}
}  // namespace

SpecialSplitter::SpecialSplitter(const Vocab& vocab) : vocab_(vocab) {
  nodes_.emplace_back();  // root
  const auto& sp = vocab.special_tokens;
  for (size_t rank = 0; rank < sp.size(); ++rank) {
    const std::string_view t = vocab.text(sp[rank]);
    if (t.empty()) continue;  // cannot happen: empty texts are renamed
    uint32_t node = 0;
    for (size_t i = 0; i < t.size(); ++i) {
      const uint8_t b = uint8_t(t[i]);
      uint32_t c = node == 0 ? root_children_[b] : child(node, b);
      if (c == 0) {
        c = uint32_t(nodes_.size());
        Node nn;
        nn.byte = b;
        if (node == 0) {
          root_children_[b] = c;
        } else {
          nn.next_sibling = nodes_[node].first_child;
          nodes_[node].first_child = c;
        }
        nodes_.push_back(nn);
      }
      node = c;
    }
    // Two special tokens with one text: keep the first in order (llama.cpp
    // splits at the first one tried; the second then never matches), and the
    // first that also takes part without parse_special.
    if (nodes_[node].rank < 0) nodes_[node].rank = int32_t(rank);
    const uint16_t a = vocab.attrs[size_t(sp[rank])];
    if (nodes_[node].rank_plain < 0 && !(a & (TOKEN_ATTR_CONTROL | TOKEN_ATTR_UNKNOWN)))
      nodes_[node].rank_plain = int32_t(rank);
  }
}

uint32_t SpecialSplitter::child(uint32_t node, uint8_t b) const {
  for (uint32_t c = nodes_[node].first_child; c != 0; c = nodes_[c].next_sibling)
    if (nodes_[c].byte == b) return c;
  return 0;
}

std::vector<TextFragment> SpecialSplitter::split(std::string_view text, bool parse_special) const {
  std::vector<TextFragment> frags;
  if (text.empty()) return frags;
  if (text.size() > UINT32_MAX) throw Error("tokenizer: text longer than 4 GiB");
  frags.push_back({-1, 0, uint32_t(text.size())});

  // Which special tokens occur anywhere in the text.
  const auto& sp = vocab_.special_tokens;
  std::vector<uint8_t> seen;
  bool any = false;
  const char* p = text.data();
  const size_t n = text.size();
  for (size_t i = 0; i < n; ++i) {
    uint32_t node = root_children_[uint8_t(p[i])];
    size_t j = i + 1;
    while (node != 0) {
      const int32_t r = parse_special ? nodes_[node].rank : nodes_[node].rank_plain;
      if (r >= 0) {
        if (!any) seen.assign(sp.size(), 0), any = true;
        seen[size_t(r)] = 1;
      }
      if (j >= n) break;
      node = child(node, uint8_t(p[j++]));
    }
  }
  if (!any) return frags;
  std::vector<int32_t> ranks;
  for (size_t r = 0; r < seen.size(); ++r)
    if (seen[r]) ranks.push_back(int32_t(r));

  // llama.cpp's partition, for those tokens only.
  std::vector<TextFragment> next;
  for (const int32_t r : ranks) {
    const int32_t id = sp[size_t(r)];
    const std::string_view tok = vocab_.text(id);
    const uint16_t attr = vocab_.attrs[size_t(id)];
    next.clear();
    bool changed = false;
    for (const TextFragment& f : frags) {
      if (f.is_token()) {
        next.push_back(f);
        continue;
      }
      size_t off = f.offset, len = f.length;
      for (;;) {
        const size_t m = text.substr(0, off + len).find(tok, off);
        if (m == std::string_view::npos) {
          if (len > 0) next.push_back({-1, uint32_t(off), uint32_t(len)});
          break;
        }
        changed = true;
        if (m > off) {
          size_t left_len = m - off;
          if (attr & TOKEN_ATTR_LSTRIP)
            while (left_len > 0 && c_space(text[off + left_len - 1])) --left_len;
          if (left_len > 0) next.push_back({-1, uint32_t(off), uint32_t(left_len)});
        }
        next.push_back({id, 0, 0});
        size_t right_off = m + tok.size();
        size_t right_len = off + len - right_off;
        if (attr & TOKEN_ATTR_RSTRIP)
          while (right_len > 0 && c_space(text[right_off])) ++right_off, --right_len;
        off = right_off;
        len = right_len;
        if (len == 0) break;
      }
    }
    if (changed) frags.swap(next);
  }
  return frags;
}

}  // namespace weir
