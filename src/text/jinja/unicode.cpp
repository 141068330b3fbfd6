#include "text/jinja/unicode.h"

#include <algorithm>

#include "text/jinja/work.h"

namespace weir::jinja {

using namespace unicode_tables;

char32_t utf8_next(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int n = 0;  // continuation bytes
  char32_t cp = 0, min = 0;
  if (b0 >= 0xc2 && b0 <= 0xdf) n = 1, cp = b0 & 0x1f, min = 0x80;
  else if (b0 >= 0xe0 && b0 <= 0xef) n = 2, cp = b0 & 0x0f, min = 0x800;
  else if (b0 >= 0xf0 && b0 <= 0xf4) n = 3, cp = b0 & 0x07, min = 0x10000;
  bool ok = n > 0 && i + n < s.size();
  for (int k = 1; ok && k <= n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    ok = (b & 0xc0) == 0x80;
    cp = (cp << 6) | (b & 0x3f);
  }
  // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
  if (!ok || cp < min || (cp >= 0xd800 && cp < 0xe000) || cp > 0x10ffff) {
    ++i;
    return 0xdc00 + b0;
  }
  i += n + 1;
  return cp;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp >= 0xdc80 && cp <= 0xdcff) {
    out.push_back(static_cast<char>(cp - 0xdc00));  // an undecodable byte, as it was
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

std::vector<char32_t> utf8_decode(std::string_view s) {
  charge_work(s.size() * sizeof(char32_t));
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(utf8_next(s, i));
  return out;
}

std::string utf8_encode(const std::vector<char32_t>& cps) {
  will_build(cps.size());  // at least a byte each
  std::string out;
  out.reserve(cps.size());
  for (char32_t c : cps) utf8_append(out, c);
  return out;
}

size_t utf8_length(std::string_view s) {
  charge_work(s.size());
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) utf8_next(s, i);
  return n;
}

namespace {

bool in_ranges(const Range* r, size_t n, char32_t cp) {
  const Range* end = r + n;
  const Range* it = std::upper_bound(r, end, cp, [](char32_t c, const Range& x) { return c < x.first; });
  return it != r && cp <= (it - 1)->last;
}

// Appends the mapping of cp; the runs are sorted by first code point.
void append_mapped(std::string& out, char32_t cp, const CaseRun* runs, size_t n_runs,
                   const CaseSpecial* special, size_t n_special) {
  const CaseSpecial* se = special + n_special;
  const CaseSpecial* s = std::lower_bound(special, se, cp, [](const CaseSpecial& x, char32_t c) { return x.cp < c; });
  if (s != se && s->cp == cp) {
    out += s->utf8;
    return;
  }
  const CaseRun* re = runs + n_runs;
  const CaseRun* r = std::upper_bound(runs, re, cp, [](char32_t c, const CaseRun& x) { return c < x.first; });
  if (r != runs) {
    --r;
    if (cp <= r->last && (cp - r->first) % r->stride == 0) {
      utf8_append(out, static_cast<char32_t>(static_cast<int64_t>(cp) + r->delta));
      return;
    }
  }
  utf8_append(out, cp);
}

void append_lower(std::string& out, char32_t c) {
  append_mapped(out, c, lower_runs, lower_runs_size, lower_special, lower_special_size);
}
void append_upper(std::string& out, char32_t c) {
  append_mapped(out, c, upper_runs, upper_runs_size, upper_special, upper_special_size);
}
void append_title(std::string& out, char32_t c) {
  append_mapped(out, c, title_runs, title_runs_size, title_special, title_special_size);
}

bool is_case_ignorable(char32_t cp) {
  return in_ranges(case_ignorable_ranges, case_ignorable_ranges_size, cp);
}

// Lowercases cps[i]; a capital sigma becomes the final form at a word's end
// (a cased letter before it, none after, skipping case-ignorable ones).
void append_lower_at(std::string& out, const std::vector<char32_t>& cps, size_t i) {
  if (cps[i] != 0x3a3) {
    append_lower(out, cps[i]);
    return;
  }
  size_t j = i;
  while (j > 0 && is_case_ignorable(cps[j - 1])) --j;
  bool final_form = j > 0 && is_cased(cps[j - 1]);
  if (final_form) {
    size_t k = i + 1;
    while (k < cps.size() && is_case_ignorable(cps[k])) ++k;
    final_form = k == cps.size() || !is_cased(cps[k]);
  }
  utf8_append(out, final_form ? 0x3c2 : 0x3c3);
}

}  // namespace

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
         c == 0x202f || c == 0x205f || c == 0x3000;
}

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d ||
         c == 0x1e || c == 0x85 || c == 0x2028 || c == 0x2029;
}

bool is_printable(char32_t cp) { return in_ranges(printable_ranges, printable_ranges_size, cp); }
bool is_alnum(char32_t cp) { return in_ranges(alnum_ranges, alnum_ranges_size, cp); }
bool is_cased(char32_t cp) { return in_ranges(cased_ranges, cased_ranges_size, cp); }
bool is_alpha(char32_t cp) { return in_ranges(alpha_ranges, alpha_ranges_size, cp); }
bool is_digit(char32_t cp) { return in_ranges(digit_ranges, digit_ranges_size, cp); }
bool is_lowercase(char32_t cp) { return in_ranges(lowercase_ranges, lowercase_ranges_size, cp); }
bool is_uppercase(char32_t cp) { return in_ranges(uppercase_ranges, uppercase_ranges_size, cp); }

std::string to_lower(std::string_view s) {
  charge_work(s.size());
  const std::vector<char32_t> cps = utf8_decode(s);
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < cps.size(); ++i) append_lower_at(out, cps, i);
  check_built(out);
  return out;
}

std::string to_upper(std::string_view s) {
  charge_work(s.size());
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_upper(out, utf8_next(s, i));
  check_built(out);
  return out;
}

std::string to_title(std::string_view s) {
  charge_work(s.size());
  const std::vector<char32_t> cps = utf8_decode(s);
  std::string out;
  out.reserve(s.size());
  bool previous_is_cased = false;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (previous_is_cased) append_lower_at(out, cps, i);
    else append_title(out, cps[i]);
    previous_is_cased = is_cased(cps[i]);
  }
  check_built(out);
  return out;
}

std::string to_capitalized(std::string_view s) {
  charge_work(s.size());
  const std::vector<char32_t> cps = utf8_decode(s);
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < cps.size(); ++i) {
    if (i == 0) append_title(out, cps[i]);
    else append_lower_at(out, cps, i);
  }
  check_built(out);
  return out;
}

std::string swap_case(std::string_view s) {
  charge_work(s.size());
  const std::vector<char32_t> cps = utf8_decode(s);
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < cps.size(); ++i) {
    if (is_uppercase(cps[i])) append_lower_at(out, cps, i);
    else if (is_lowercase(cps[i])) append_upper(out, cps[i]);
    else utf8_append(out, cps[i]);
  }
  check_built(out);
  return out;
}

}  // namespace weir::jinja
