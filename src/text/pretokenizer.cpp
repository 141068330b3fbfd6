#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/pretokenizer.h"

#include <pcre2.h>

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace weir {

namespace {

// Unicode White_Space is exactly \t..\r, U+0085 and the Z categories.
constexpr std::string_view kWhiteSpace = "\\t-\\r\\x{85}\\p{Z}";

// Non-ASCII white space, which llama.cpp's wide-character regexes see as U+000B.
constexpr std::string_view kNotWideWhiteSpace = "(?!(?=[^\\x00-\\x7F])[\\x{85}\\p{Z}])";

// Index of the ']' that closes the class opened at p[open] (npos if none).
size_t class_end(std::string_view p, size_t open) {
  size_t i = open + 1;
  if (i < p.size() && p[i] == '^') ++i;
  if (i < p.size() && p[i] == ']') ++i;  // a leading ']' is a member
  for (; i < p.size(); ++i) {
    if (p[i] == '\\') ++i;
    else if (p[i] == ']') return i;
  }
  return std::string_view::npos;
}

// Whether the members of a class include a character outside ASCII, as
// itself or as \x{...}.
bool lists_non_ascii(std::string_view members) {
  for (size_t i = 0; i < members.size(); ++i) {
    if (uint8_t(members[i]) >= 0x80) return true;
    if (members.substr(i, 3) == "\\x{") {
      const size_t close = members.find('}', i);
      if (close == std::string_view::npos) continue;
      const std::string hex(members.substr(i + 3, close - i - 3));
      if (std::strtoul(hex.c_str(), nullptr, 16) >= 0x80) return true;
    }
  }
  return false;
}

// The pattern as PCRE2 must see it for llama.cpp's splits (see the header):
// \s and \S as Unicode White_Space; a class listing non-ASCII characters
// (and not negated) guarded against non-ASCII white space.
std::string for_pcre2(std::string_view p) {
  std::string out;
  bool in_class = false;
  size_t class_close = std::string_view::npos;  // the ']' that ends the class we are in
  bool guarded = false;                         // the class is wrapped in "(?:guard" ... ")"
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[++i];
      if (n == 's') {
        if (in_class) out.append(kWhiteSpace);
        else out.append("[").append(kWhiteSpace).append("]");
      } else if (n == 'S' && !in_class) {
        out.append("[^").append(kWhiteSpace).append("]");
      } else if (n == 'S') {
        throw Error("pre-tokenizer: \\S inside a character class is not supported");
      } else {
        out.push_back(c);
        out.push_back(n);
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      class_close = class_end(p, i);
      if (class_close != std::string_view::npos && p[i + 1] != '^') {
        guarded = lists_non_ascii(p.substr(i + 1, class_close - i - 1));
        if (guarded) out.append("(?:").append(kNotWideWhiteSpace);
      }
      out.push_back(c);
      continue;
    }
    out.push_back(c);
    if (in_class && i == class_close) {
      in_class = false;
      if (guarded) out.push_back(')');
      guarded = false;
    }
  }
  return out;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof buf) < 0) return "error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

// Length of the well-formed UTF-8 sequence at p (Unicode Table 3-7), 0 if none.
size_t valid_len(const uint8_t* p, size_t n) {
  const uint8_t c = p[0];
  auto cont = [&](size_t k, uint8_t lo = 0x80, uint8_t hi = 0xBF) {
    return k < n && p[k] >= lo && p[k] <= hi;
  };
  if (c < 0x80) return 1;
  if (c < 0xC2) return 0;
  if (c < 0xE0) return cont(1) ? 2 : 0;
  if (c < 0xF0) {
    const uint8_t lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    return cont(1, lo, hi) && cont(2) ? 3 : 0;
  }
  if (c < 0xF5) {
    const uint8_t lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    return cont(1, lo, hi) && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

// How many bytes llama.cpp's lenient decoder (unicode_cpt_from_utf8) takes
// as one code point at p: the length the lead byte announces when the
// continuation bytes are there (overlong forms and surrogates included),
// otherwise 1 (that byte alone becomes U+FFFD).
size_t lenient_len(const uint8_t* p, size_t n) {
  const uint8_t c = p[0];
  if (c < 0x80 || !(c & 0x40)) return 1;
  const size_t len = !(c & 0x20) ? 2 : !(c & 0x10) ? 3 : !(c & 0x08) ? 4 : 1;
  if (len > n) return 1;
  for (size_t k = 1; k < len; ++k)
    if ((p[k] & 0xC0) != 0x80) return 1;
  return len;
}

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  explicit Regex(std::string_view pattern) {
    const std::string p = for_pcre2(pattern);
    int err = 0;
    PCRE2_SIZE err_off = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                         PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY,
                         &err, &err_off, nullptr);
    if (!code)
      throw Error("pre-tokenizer: regex \"" + std::string(pattern) + "\" does not compile at " +
                  std::to_string(err_off) + ": " + pcre2_message(err));
    // JIT when this PCRE2 has it; the interpreter gives the same matches.
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  }
  ~Regex() { pcre2_code_free(code); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Words of s[b, e): matches, and the text between them, in order.
  void split(std::string_view s, size_t b, size_t e, pcre2_match_data* md,
             std::vector<WordSpan>& out) const {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data() + b);
    const size_t n = e - b;
    size_t pos = 0, gap = 0;  // gap: start of text not yet emitted
    auto emit = [&](size_t from, size_t to) {
      if (to > from) out.push_back({uint32_t(b + from), uint32_t(to - from)});
    };
    while (pos < n) {
      int rc = pcre2_match(code, subject, n, pos, PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = match_big_stack(subject, n, pos, md);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) throw Error("pre-tokenizer: PCRE2 match failed: " + pcre2_message(rc));
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      if (ov[1] == ov[0]) {  // empty match (none of our regexes has one): step one character
        pos = ov[0] + 1;
        while (pos < n && (subject[pos] & 0xC0) == 0x80) ++pos;
        continue;
      }
      emit(gap, ov[0]);
      emit(ov[0], ov[1]);
      pos = gap = ov[1];
    }
    emit(gap, n);
  }

  // Long runs can need more than the JIT's default 32 KiB stack.
  int match_big_stack(PCRE2_SPTR subject, size_t n, size_t pos, pcre2_match_data* md) const {
    pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 512 * 1024 * 1024, nullptr);
    pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
    if (!stack || !ctx) {
      pcre2_jit_stack_free(stack);
      pcre2_match_context_free(ctx);
      return PCRE2_ERROR_NOMEMORY;
    }
    pcre2_jit_stack_assign(ctx, nullptr, stack);
    const int rc = pcre2_match(code, subject, n, pos, PCRE2_NO_UTF_CHECK, md, ctx);
    pcre2_match_context_free(ctx);
    pcre2_jit_stack_free(stack);
    return rc;
  }
};

PreTokenizer::PreTokenizer(Kind kind, bool ignore_merges)
    : kind_(kind), ignore_merges_(ignore_merges) {
  for (std::string_view p : patterns(kind)) regexes_.push_back(std::make_shared<const Regex>(p));
}

void PreTokenizer::split(std::string_view text, std::vector<WordSpan>& out) const {
  if (text.empty()) return;
  if (text.size() > UINT32_MAX / 4) throw Error("pre-tokenizer: text longer than 1 GiB");

  // Well-formed UTF-8 is matched in place; anything else on a copy where each
  // character llama.cpp would decode as U+FFFD is U+FFFD (see the header).
  std::string clean;
  std::vector<uint32_t> to_orig;  // clean offset -> text offset (at character starts)
  std::string_view s = text;
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = 0; i < text.size();) {
    const size_t v = valid_len(p + i, text.size() - i);
    if (v) {
      i += v;
      continue;
    }
    // First bad byte at i: build the copy from here on.
    clean.assign(text.substr(0, i));
    to_orig.resize(i);
    for (size_t k = 0; k < i; ++k) to_orig[k] = uint32_t(k);
    while (i < text.size()) {
      size_t len = valid_len(p + i, text.size() - i);
      if (len) {
        clean.append(text.substr(i, len));
      } else {
        len = lenient_len(p + i, text.size() - i);
        clean.append("\xEF\xBF\xBD");
      }
      to_orig.resize(clean.size(), uint32_t(i));
      i += len;
    }
    to_orig.push_back(uint32_t(text.size()));
    s = clean;
    break;
  }

  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  if (!md) throw Error("pre-tokenizer: out of memory");
  std::vector<WordSpan> cur{{0, uint32_t(s.size())}}, next;
  try {
    for (const auto& re : regexes_) {
      next.clear();
      for (const WordSpan& w : cur) re->split(s, w.offset, size_t(w.offset) + w.length, md, next);
      cur.swap(next);
    }
  } catch (...) {
    pcre2_match_data_free(md);
    throw;
  }
  pcre2_match_data_free(md);

  if (to_orig.empty()) {
    out.insert(out.end(), cur.begin(), cur.end());
    return;
  }
  for (const WordSpan& w : cur) {
    const uint32_t b = to_orig[w.offset], e = to_orig[size_t(w.offset) + w.length];
    out.push_back({b, e - b});
  }
}

}  // namespace weir
