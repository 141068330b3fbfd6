#include "text/utf8_streamer.h"

#include <gtest/gtest.h>

#include <random>

namespace weir {
namespace {

std::string stream(const std::vector<std::string>& pieces) {
  Utf8Streamer s;
  std::string out;
  for (const auto& p : pieces) {
    const std::string part = s.push(p);
    EXPECT_TRUE(is_valid_utf8(part));
    out += part;
  }
  return out + s.flush();
}

TEST(Utf8Streamer, HoldsBackIncompleteCharacters) {
  Utf8Streamer s;
  EXPECT_EQ(s.push("a\xe2"), "a");
  EXPECT_EQ(s.pending(), 1u);
  EXPECT_EQ(s.push("\x96"), "");
  EXPECT_EQ(s.pending(), 2u);
  EXPECT_EQ(s.push("\x81z"), "\xe2\x96\x81z");
  EXPECT_EQ(s.pending(), 0u);
  EXPECT_EQ(s.push("\xf0\x9f"), "");
  EXPECT_EQ(s.push("\x98"), "");
  EXPECT_EQ(s.push("\x80"), "\xf0\x9f\x98\x80");
  EXPECT_EQ(s.flush(), "");
}

TEST(Utf8Streamer, ReplacesWhatCannotBecomeValid) {
  const std::string R = "\xef\xbf\xbd";
  EXPECT_EQ(stream({"\xff"}), R);
  EXPECT_EQ(stream({"\x80" "a"}), R + "a");
  EXPECT_EQ(stream({"\xe2", "x"}), R + "x");
  EXPECT_EQ(stream({"\xe2\x96", "x"}), R + "x");      // one U+FFFD for the maximal subpart
  EXPECT_EQ(stream({"\xc0\xaf"}), R + R);            // overlong
  EXPECT_EQ(stream({"\xed\xa0\x80"}), R + R + R);    // surrogate
  EXPECT_EQ(stream({"\xf4\x90\x80\x80"}), R + R + R + R);  // past U+10FFFF
  EXPECT_EQ(stream({"ok\xe2\x96"}), "ok" + R);        // incomplete at the end
}

TEST(Utf8Streamer, AnySplitOfValidTextIsLossless) {
  const std::string text = "Größe ∀x ∈ ℝ 😀 नमस्ते ▁ end";
  std::mt19937 rng(7);
  for (int iter = 0; iter < 500; ++iter) {
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      const size_t n = std::min(text.size() - i, size_t(rng() % 4));
      pieces.push_back(text.substr(i, n));
      i += n;
    }
    EXPECT_EQ(stream(pieces), text);
  }
}

TEST(Utf8Streamer, Validity) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("\xe2\x96\x81\xf0\x9f\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("\xe2\x96"));
  EXPECT_FALSE(is_valid_utf8("\xc1\xbf"));
  EXPECT_FALSE(is_valid_utf8("\xf5\x80\x80\x80"));
}

}  // namespace
}  // namespace weir
