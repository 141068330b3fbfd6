// Joins token pieces into text for printing as it is generated. A piece can
// end in the middle of a UTF-8 character (byte-fallback tokens <0xE2><0x96>
// <0x81> make one character from three pieces); the streamer holds such an
// incomplete tail back until the rest arrives, so what it hands out is always
// valid UTF-8. Bytes that cannot become valid UTF-8 are replaced by U+FFFD,
// one per maximal ill-formed subpart (the Unicode standard's practice, as
// Python's decode(errors="replace") does).
#pragma once
#include <string>
#include <string_view>

namespace weir {

class Utf8Streamer {
 public:
  // Adds bytes; returns the text completed by them (possibly empty).
  std::string push(std::string_view bytes);
  // End of stream: returns what is held back, an incomplete sequence
  // becoming U+FFFD. The streamer is then empty.
  std::string flush();
  // Bytes held back waiting for the rest of a character (0..3).
  size_t pending() const { return n_pending_; }
  void reset() { n_pending_ = 0; }

 private:
  char pending_[4] = {};
  size_t n_pending_ = 0;
};

// True when `s` is well-formed UTF-8.
bool is_valid_utf8(std::string_view s);

}  // namespace weir
