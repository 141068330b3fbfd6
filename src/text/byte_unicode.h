// GPT-2's byte-level alphabet (bytes_to_unicode in OpenAI's encoder.py): every
// byte stands for one printable Unicode character, so byte-level BPE vocabularies
// hold no raw control bytes or spaces. Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF
// stand for the character of the same code; the other 68 bytes (controls,
// space, 0x7F..0xA0, 0xAD) stand for U+0100.. U+0143, in byte order.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace weir {

// The UTF-8 text of the character standing for byte b (1 or 2 bytes).
std::string_view byte_to_unicode(uint8_t b);

// The byte that code point cp stands for, or -1 if cp is not in the alphabet.
int unicode_to_byte(uint32_t cp);

// Appends the byte-level text of `bytes` (each byte -> its character).
void append_byte_level(std::string& out, std::string_view bytes);

}  // namespace weir
