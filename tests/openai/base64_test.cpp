// Base64 against RFC 4648's test vectors (section 10), and the bytes of
// float32 values as Python's base64 and struct modules write them.
#include "engine/openai/base64.h"

#include <gtest/gtest.h>

namespace weir::openai {
namespace {

TEST(Base64, Rfc4648Vectors) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("foob"), "Zm9vYg==");
  EXPECT_EQ(base64_encode("fooba"), "Zm9vYmE=");
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
}

TEST(Base64, EveryByteValue) {
  // base64.b64encode(struct.pack("<2f", 1.0, -0.5)) and of bytes 0xFF 0xFE 0x00.
  EXPECT_EQ(base64_encode(std::string("\x00\x00\x80\x3f\x00\x00\x00\xbf", 8)), "AACAPwAAAL8=");
  EXPECT_EQ(base64_encode(std::string("\xff\xfe\x00", 3)), "//4A");
}

}  // namespace
}  // namespace weir::openai
