#include "text/byte_unicode.h"

#include <array>

namespace weir {

namespace {

bool stands_for_itself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Table {
  std::array<uint32_t, 256> cp{};        // byte -> code point
  std::array<int16_t, 0x144> byte{};     // code point -> byte (-1: none)
  std::array<std::array<char, 2>, 256> utf8{};
  std::array<uint8_t, 256> len{};
  Table() {
    byte.fill(-1);
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      cp[b] = stands_for_itself(b) ? uint32_t(b) : next++;
      byte[cp[b]] = int16_t(b);
      if (cp[b] < 0x80) {
        utf8[b][0] = char(cp[b]);
        len[b] = 1;
      } else {
        utf8[b][0] = char(0xC0 | (cp[b] >> 6));
        utf8[b][1] = char(0x80 | (cp[b] & 0x3F));
        len[b] = 2;
      }
    }
  }
};

const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

std::string_view byte_to_unicode(uint8_t b) {
  const Table& t = table();
  return std::string_view(t.utf8[b].data(), t.len[b]);
}

int unicode_to_byte(uint32_t cp) {
  const Table& t = table();
  return cp < t.byte.size() ? t.byte[cp] : -1;
}

void append_byte_level(std::string& out, std::string_view bytes) {
  const Table& t = table();
  for (char c : bytes) {
    const uint8_t b = uint8_t(c);
    out.append(t.utf8[b].data(), t.len[b]);
  }
}

}  // namespace weir
