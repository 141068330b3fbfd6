#include "text/utf8_streamer.h"

#include <algorithm>
#include <cstdint>

namespace weir {

namespace {

constexpr std::string_view kReplacement = "\xef\xbf\xbd";  // U+FFFD

// For a lead byte: the sequence length and the allowed range of the second
// byte (Unicode Table 3-7, which excludes overlongs, surrogates and code
// points past U+10FFFF). len 0: the byte cannot start a sequence.
struct Lead {
  int len;
  uint8_t lo, hi;
};
inline Lead lead_info(uint8_t c) {
  if (c < 0x80) return {1, 0, 0};
  if (c < 0xC2) return {0, 0, 0};
  if (c < 0xE0) return {2, 0x80, 0xBF};
  if (c == 0xE0) return {3, 0xA0, 0xBF};
  if (c == 0xED) return {3, 0x80, 0x9F};
  if (c < 0xF0) return {3, 0x80, 0xBF};
  if (c == 0xF0) return {4, 0x90, 0xBF};
  if (c < 0xF4) return {4, 0x80, 0xBF};
  if (c == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

enum class Step { kOk, kBad, kIncomplete };

// Examines the sequence at s[i]; sets len to the bytes it takes (complete
// character, or the maximal ill-formed subpart when bad).
inline Step examine(std::string_view s, size_t i, size_t& len) {
  const Lead L = lead_info(uint8_t(s[i]));
  if (L.len == 0) {
    len = 1;
    return Step::kBad;
  }
  for (int j = 1; j < L.len; ++j) {
    if (i + size_t(j) >= s.size()) {
      len = s.size() - i;
      return Step::kIncomplete;
    }
    const uint8_t b = uint8_t(s[i + size_t(j)]);
    const uint8_t lo = j == 1 ? L.lo : 0x80, hi = j == 1 ? L.hi : 0xBF;
    if (b < lo || b > hi) {
      len = size_t(j);
      return Step::kBad;
    }
  }
  len = size_t(L.len);
  return Step::kOk;
}

}  // namespace

std::string Utf8Streamer::push(std::string_view bytes) {
  std::string in;
  std::string_view s = bytes;
  if (n_pending_) {
    in.assign(pending_, n_pending_);
    in.append(bytes);
    s = in;
    n_pending_ = 0;
  }
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t len;
    switch (examine(s, i, len)) {
      case Step::kOk:
        out.append(s.data() + i, len);
        break;
      case Step::kBad:
        out.append(kReplacement);
        break;
      case Step::kIncomplete:
        len = std::min<size_t>(len, sizeof pending_);  // always < 4: a sequence is at most 4 bytes
        for (size_t k = 0; k < len; ++k) pending_[k] = s[i + k];
        n_pending_ = len;
        break;
    }
    i += len;
  }
  return out;
}

std::string Utf8Streamer::flush() {
  const bool had = n_pending_ != 0;
  n_pending_ = 0;
  return had ? std::string(kReplacement) : std::string();
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t len;
    if (examine(s, i, len) != Step::kOk) return false;
    i += len;
  }
  return true;
}

}  // namespace weir
