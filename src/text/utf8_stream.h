// Streams token pieces as text while holding back an incomplete UTF-8
// sequence, so a character split over two tokens is printed whole.
#pragma once
#include <string>
#include <string_view>

namespace weir {

class Utf8Stream {
 public:
  // Appends a piece; returns the text that is complete so far.
  std::string push(std::string_view piece);
  // Whatever is still held (an incomplete sequence at the end of generation).
  std::string flush();

 private:
  std::string pending_;
};

}  // namespace weir
