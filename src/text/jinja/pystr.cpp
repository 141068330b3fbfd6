#include "text/jinja/pystr.h"

#include <algorithm>
#include <cstring>

#include "text/jinja/unicode.h"
#include "text/jinja/value.h"
#include "text/jinja/work.h"

namespace weir::jinja::pystr {

size_t find_bytes(std::string_view s, std::string_view sub, size_t from) {
  if (from > s.size()) return std::string_view::npos;
  if (sub.empty()) return from;
  // Looked for in windows that double from a small one, overlapping by
  // sub.size() - 1, so that each call's work follows the distance to the
  // match: memory checkers (ASan) read all of the range given to memmem at
  // every call, which made counting a byte in 60 MB quadratic under them.
  size_t at = from, window = 2 * sub.size() + 256;
  for (;;) {
    const size_t end = s.size() - at > window ? at + window : s.size();
    if (end - at >= sub.size()) {
      if (const void* hit = memmem(s.data() + at, end - at, sub.data(), sub.size())) {
        const size_t i = static_cast<size_t>(static_cast<const char*>(hit) - s.data());
        charge_work(i - from + sub.size());
        return i;
      }
    }
    if (end == s.size()) {
      charge_work(s.size() - from + sub.size());
      return std::string_view::npos;
    }
    at = end - (sub.size() - 1);
    window *= 2;
  }
}

size_t rfind_bytes(std::string_view s, std::string_view sub, size_t end) {
  end = std::min(end, s.size());
  if (sub.size() > end) return std::string_view::npos;
  uint64_t compared = 0;
  for (size_t at = end - sub.size() + 1; at-- > 0;) {
    size_t k = 0;
    while (k < sub.size() && s[at + k] == sub[k]) ++k;
    compared += k + 1;
    if (compared > (1u << 20)) charge_work(compared), compared = 0;
    if (k == sub.size()) {
      charge_work(compared);
      return at;
    }
  }
  charge_work(compared);
  return std::string_view::npos;
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::vector<char32_t> cps = utf8_decode(s);
  const std::vector<char32_t> set = chars ? utf8_decode(*chars) : std::vector<char32_t>{};
  auto strippable = [&](char32_t c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end() : is_space(c);
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strippable(cps[b])) ++b;
  if (right)
    while (e > b && strippable(cps[e - 1])) --e;
  return utf8_encode(std::vector<char32_t>(cps.begin() + static_cast<std::ptrdiff_t>(b),
                                           cps.begin() + static_cast<std::ptrdiff_t>(e)));
}

namespace {

// Byte offsets of whitespace runs' edges: the words of s. Charged as the
// list of strings split makes of them, before it is built.
std::vector<std::pair<size_t, size_t>> words(std::string_view s) {
  size_t n = 0;
  bool in_word = false;
  for (size_t i = 0; i < s.size();) {
    const bool space = is_space(utf8_next(s, i));
    n += !space && !in_word;
    in_word = !space;
  }
  charge_work(s.size());
  will_build_list(n);
  std::vector<std::pair<size_t, size_t>> out;
  out.reserve(n);
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    if (is_space(utf8_next(s, j))) {
      i = j;
      continue;
    }
    const size_t start = i;
    size_t end = j;
    i = j;
    while (i < s.size()) {
      size_t k = i;
      if (is_space(utf8_next(s, k))) break;
      i = end = k;
    }
    out.emplace_back(start, end);
  }
  return out;
}

}  // namespace

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (!sep) {
    const auto w = words(s);
    for (size_t i = 0; i < w.size(); ++i) {
      if (maxsplit >= 0 && static_cast<int64_t>(i) == maxsplit) {
        out.emplace_back(s.substr(w[i].first));  // the rest, trailing spaces kept
        break;
      }
      out.emplace_back(s.substr(w[i].first, w[i].second - w[i].first));
    }
    return out;
  }
  // The parts are counted first, and refused when too many.
  const uint64_t parts = uint64_t(count(s, *sep)) + 1;
  will_build_list(maxsplit >= 0 ? std::min<uint64_t>(parts, uint64_t(maxsplit) + 1) : parts);
  size_t start = 0;
  int64_t n = 0;
  for (size_t at = find_bytes(s, *sep); at != std::string_view::npos && (maxsplit < 0 || n < maxsplit);
       at = find_bytes(s, *sep, start), ++n) {
    out.emplace_back(s.substr(start, at - start));
    start = at + sep->size();
  }
  out.emplace_back(s.substr(start));
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  if (maxsplit < 0) return split(s, sep, maxsplit);
  std::vector<std::string> out;
  if (!sep) {
    const auto w = words(s);
    int64_t n = 0;
    size_t i = w.size();
    while (i > 0) {
      --i;
      if (n == maxsplit) {
        out.emplace_back(s.substr(0, w[i].second));  // the rest, leading spaces kept
        break;
      }
      out.emplace_back(s.substr(w[i].first, w[i].second - w[i].first));
      ++n;
    }
    std::reverse(out.begin(), out.end());
    return out;
  }
  will_build_list(std::min<uint64_t>(uint64_t(count(s, *sep)) + 1, uint64_t(maxsplit) + 1));
  size_t end = s.size();
  int64_t n = 0;
  while (n < maxsplit) {
    if (end < sep->size()) break;
    const size_t at = rfind_bytes(s, *sep, end);
    if (at == std::string_view::npos) break;
    out.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
    end = at;
    ++n;
  }
  out.emplace_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  uint64_t lines = 1;
  for (size_t i = 0; i < s.size();) lines += is_line_break(utf8_next(s, i));
  charge_work(s.size());
  will_build_list(lines);
  std::vector<std::string> out;
  size_t start = 0, i = 0;
  while (i < s.size()) {
    size_t j = i;
    const char32_t c = utf8_next(s, j);
    if (!is_line_break(c)) {
      i = j;
      continue;
    }
    if (c == '\r' && j < s.size() && s[j] == '\n') ++j;
    out.emplace_back(s.substr(start, (keepends ? j : i) - start));
    start = i = j;
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view with, int64_t count) {
  // The result's size first: refused before it is built when too big.
  uint64_t hits = old.empty() ? utf8_length(s) + 1 : uint64_t(pystr::count(s, old));
  if (count >= 0) hits = std::min<uint64_t>(hits, uint64_t(count));
  const uint64_t removed = hits * old.size();
  const uint64_t added = with.size() && hits > UINT64_MAX / 2 / with.size() ? UINT64_MAX / 2 : hits * with.size();
  will_build(s.size() - removed + added);
  std::string out;
  out.reserve(s.size() - removed + added);
  if (old.empty()) {
    // Python puts `with` before every character and at the end.
    int64_t n = 0;
    size_t i = 0;
    while (i < s.size()) {
      if (count < 0 || n < count) out += with, ++n;
      const size_t start = i;
      utf8_next(s, i);
      out += s.substr(start, i - start);
    }
    if (count < 0 || n < count) out += with;
    return out;
  }
  size_t start = 0;
  int64_t n = 0;
  for (size_t at = find_bytes(s, old); at != std::string_view::npos && (count < 0 || n < count);
       at = find_bytes(s, old, start)) {
    out += s.substr(start, at - start);
    out += with;
    start = at + old.size();
    ++n;
  }
  out += s.substr(start);
  return out;
}

int64_t find(std::string_view s, std::string_view sub, std::optional<int64_t> start, std::optional<int64_t> end,
             bool from_right) {
  const std::vector<char32_t> cps = utf8_decode(s);
  const auto len = static_cast<int64_t>(cps.size());
  // CPython's ADJUST_INDICES: negative ones count from the end; a start past
  // the end stays there (and finds nothing, not even "").
  auto adjust = [len](int64_t i) {
    if (i < 0) i = std::max<int64_t>(0, i + len);
    return std::min(i, len + 1);
  };
  const int64_t b = start ? adjust(*start) : 0;
  const int64_t e = end ? std::min(adjust(*end), len) : len;
  const std::vector<char32_t> needle = utf8_decode(sub);
  const auto n = static_cast<int64_t>(needle.size());
  if (e - b < n) return -1;
  // Charged every code point compared: n at each place at worst.
  uint64_t compared = 0;
  auto matches = [&](int64_t at) {
    int64_t k = 0;
    while (k < n && cps[static_cast<size_t>(at + k)] == needle[static_cast<size_t>(k)]) ++k;
    compared += static_cast<uint64_t>(k) + 1;
    if (compared > (1u << 20)) charge_work(compared), compared = 0;
    return k == n;
  };
  if (from_right) {
    for (int64_t at = e - n; at >= b; --at)
      if (matches(at)) return at;
  } else {
    for (int64_t at = b; at + n <= e; ++at)
      if (matches(at)) return at;
  }
  return -1;
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(utf8_length(s)) + 1;
  int64_t n = 0;
  for (size_t at = find_bytes(s, sub); at != std::string_view::npos; at = find_bytes(s, sub, at + sub.size())) ++n;
  return n;
}

namespace {

std::string repeat(std::string_view fill, int64_t n) {
  if (n > 0 && !fill.empty()) will_build(fill.size() * std::min<uint64_t>(uint64_t(n), kMaxTextBytes + 1));
  std::string out;
  for (int64_t i = 0; i < n; ++i) out += fill;
  return out;
}

// Checks, before building, s padded with n fills.
void will_pad(std::string_view s, std::string_view fill, int64_t n) {
  will_build(s.size() + fill.size() * std::min<uint64_t>(uint64_t(n), kMaxTextBytes + 1));
}

}  // namespace

std::string center(std::string_view s, int64_t width, std::string_view fill) {
  const auto len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return std::string(s);
  const int64_t marg = width - len;
  const int64_t left = marg / 2 + (marg & width & 1);
  will_pad(s, fill, marg);
  return repeat(fill, left) + std::string(s) + repeat(fill, marg - left);
}

std::string ljust(std::string_view s, int64_t width, std::string_view fill) {
  const auto len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return std::string(s);
  will_pad(s, fill, width - len);
  return std::string(s) + repeat(fill, width - len);
}

std::string rjust(std::string_view s, int64_t width, std::string_view fill) {
  const auto len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return std::string(s);
  will_pad(s, fill, width - len);
  return repeat(fill, width - len) + std::string(s);
}

std::string zfill(std::string_view s, int64_t width) {
  const auto len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return std::string(s);
  will_pad(s, "0", width - len);
  std::string out = repeat("0", width - len);
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) return std::string(1, s[0]) + out + std::string(s.substr(1));
  return out + std::string(s);
}

bool is_lower(std::string_view s) {
  charge_work(s.size());
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8_next(s, i);
    if (is_uppercase(c) || (is_cased(c) && !is_lowercase(c))) return false;
    if (is_lowercase(c)) cased = true;
  }
  return cased;
}

bool is_upper(std::string_view s) {
  charge_work(s.size());
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8_next(s, i);
    if (is_lowercase(c) || (is_cased(c) && !is_uppercase(c))) return false;
    if (is_uppercase(c)) cased = true;
  }
  return cased;
}

}  // namespace weir::jinja::pystr
