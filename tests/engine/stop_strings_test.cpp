// Stop strings against a plain reference: the output is the text up to the
// first occurrence of any stop string, whatever the pieces it came in, and
// no piece sent ever holds a byte past that point.
#include "engine/stop_strings.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace weir {
namespace {

// The reference: search the whole text at once.
std::string cut(const std::string& text, const std::vector<std::string>& stops, bool* stopped) {
  size_t at = std::string::npos;
  for (const std::string& s : stops)
    if (!s.empty()) at = std::min(at, text.find(s));
  *stopped = at != std::string::npos;
  return *stopped ? text.substr(0, at) : text;
}

TEST(StopStrings, SplitAcrossPieces) {
  StopStrings s({"</answer>", "\n\nUser:"});
  std::string out;
  for (const char* piece : {"The answer is 4.", "</ans", "wer> and more"}) out += s.push(piece);
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(out, "The answer is 4.");
  EXPECT_EQ(s.matched(), "</answer>");
  EXPECT_EQ(s.push("x"), "");
}

TEST(StopStrings, HeldBackTailIsSentWhenItDoesNotMatch) {
  StopStrings s({"STOP"});
  EXPECT_EQ(s.push("abc ST"), "abc ");
  EXPECT_EQ(s.push("AR"), "STAR");
  EXPECT_EQ(s.push("S"), "");
  EXPECT_EQ(s.flush(), "S");
  EXPECT_FALSE(s.stopped());
}

TEST(StopStrings, RandomPiecesEqualTheReference) {
  std::mt19937 rng(7);
  const std::string alphabet = "ab\n ";
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::string> stops;
    for (int k = int(rng() % 3); k >= 0; --k) {
      std::string st;
      for (int n = 1 + int(rng() % 4); n > 0; --n) st += alphabet[rng() % alphabet.size()];
      stops.push_back(st);
    }
    std::string text;
    for (int n = int(rng() % 30); n > 0; --n) text += alphabet[rng() % alphabet.size()];
    bool want_stop = false;
    const std::string want = cut(text, stops, &want_stop);
    StopStrings s(stops);
    std::string got;
    for (size_t at = 0; at < text.size() && !s.stopped();) {
      const size_t n = 1 + rng() % 5;
      got += s.push(text.substr(at, n));
      ASSERT_EQ(got, want.substr(0, std::min(got.size(), want.size()))) << "sent a byte past the stop";
      at += n;
    }
    got += s.flush();
    EXPECT_EQ(got, want) << "trial " << trial;
    EXPECT_EQ(s.stopped(), want_stop) << "trial " << trial;
  }
}

}  // namespace
}  // namespace weir
