#include "text/utf8_stream.h"

namespace weir {
namespace {

// Length of the UTF-8 sequence a lead byte starts (1 for invalid leads).
size_t seq_len(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

}  // namespace

std::string Utf8Stream::push(std::string_view piece) {
  pending_.append(piece);
  // Find where the last (possibly incomplete) sequence starts.
  size_t n = pending_.size();
  size_t i = n;
  for (size_t back = 0; back < 4 && i > 0; ++back) {
    --i;
    const unsigned char c = static_cast<unsigned char>(pending_[i]);
    if ((c & 0xC0) != 0x80) {  // a lead byte
      if (i + seq_len(c) > n) n = i;  // incomplete: hold it back
      break;
    }
  }
  std::string out = pending_.substr(0, n);
  pending_.erase(0, n);
  return out;
}

std::string Utf8Stream::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace weir
