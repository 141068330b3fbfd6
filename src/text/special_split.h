// Splits text into special tokens and raw fragments before the model's
// tokenizer (SPM, BPE ...) runs, exactly as llama.cpp's tokenizer_st_partition:
// special tokens (Vocab::special_tokens: CONTROL, USER_DEFINED, UNKNOWN) are
// tried one after the other, longest text first; each one splits every raw
// fragment left so far at all its leftmost non-overlapping occurrences.
// CONTROL and UNKNOWN tokens take part only when parse_special is set;
// USER_DEFINED ones always do. LSTRIP / RSTRIP tokens swallow the whitespace
// next to them.
//
// The result is the same as llama.cpp's, but faster: a trie over the special
// texts finds, in one pass, which special tokens occur in the text at all, and
// only those are tried (a token that does not occur in the text cannot occur
// in a fragment of it).
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace weir {

struct Vocab;

struct TextFragment {
  int32_t token;    // a special token id, or -1 for raw text
  uint32_t offset;  // raw text: byte range in the input
  uint32_t length;
  bool is_token() const { return token >= 0; }
};

class SpecialSplitter {
 public:
  explicit SpecialSplitter(const Vocab& vocab);
  // Fragments of `text` in order; raw fragments are never empty. Empty text
  // gives no fragments.
  std::vector<TextFragment> split(std::string_view text, bool parse_special) const;

 private:
  struct Node {
    uint32_t first_child = 0;   // 0: none (node 0 is the root, never a child)
    uint32_t next_sibling = 0;  // 0: none
    int32_t rank = -1;        // first index into vocab.special_tokens with this text
    int32_t rank_plain = -1;  // same, among those used without parse_special
    uint8_t byte = 0;
  };
  uint32_t child(uint32_t node, uint8_t b) const;

  const Vocab& vocab_;
  std::vector<Node> nodes_;
  uint32_t root_children_[256] = {};  // direct table for the first byte
};

}  // namespace weir
