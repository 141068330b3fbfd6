// The n-gram (prompt lookup) proposer on hand-made token sequences, each
// expected guess written out by hand from the rule in ngram_proposer.h.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "engine/ngram_proposer.h"

namespace weir {
namespace {

using V = std::vector<int32_t>;

V guess(NgramProposer& p, const V& tokens, int max_tokens) { return p.propose(tokens, max_tokens); }

TEST(NgramProposer, GuessesWhatFollowedTheSuffixEarlier) {
  NgramProposer p({2, 4});
  // Suffix (1 2) at 0: then 3 4 1 2, cut at max_tokens.
  EXPECT_EQ(guess(p, {1, 2, 3, 4, 1, 2}, 3), (V{3, 4, 1}));
  // The guesses may run into the suffix itself (a repeating pattern).
  EXPECT_EQ(guess(p, {7, 8, 7, 8}, 8), (V{7, 8}));
  EXPECT_EQ(guess(p, {5, 5, 5}, 4), (V{5}));
}

TEST(NgramProposer, LongerMatchesWinThenLaterOnes) {
  NgramProposer p({1, 3});
  // (2 3) at 1 is followed by 9; the 3-gram (1 2 3) at 5 by 8: the longer wins.
  EXPECT_EQ(guess(p, {0, 2, 3, 9, 4, 1, 2, 3, 8, 6, 1, 2, 3}, 2), (V{8, 6}));
  // Two earlier (4 5): the latest (at 3, followed by 7) wins.
  EXPECT_EQ(guess(p, {4, 5, 6, 4, 5, 7, 4, 5}, 1), (V{7}));
  // No 2- or 3-gram repeats; the last token alone (6) did, followed by 2.
  EXPECT_EQ(guess(p, {6, 2, 9, 6}, 3), (V{2, 9, 6}));
}

TEST(NgramProposer, NothingWhereNothingRepeats) {
  NgramProposer p({2, 4});
  EXPECT_TRUE(guess(p, {1, 2, 3, 4, 5}, 4).empty());
  EXPECT_TRUE(guess(p, {1, 2, 1, 3}, 4).empty());  // only 1-grams repeat, min_n is 2
  EXPECT_TRUE(guess(p, {}, 4).empty());
  EXPECT_TRUE(guess(p, {1}, 4).empty());
  EXPECT_TRUE(guess(p, {1, 2, 1, 2}, 0).empty());
  EXPECT_TRUE(guess(p, {1, 2, 1, 2}, -3).empty());
}

TEST(NgramProposer, RefusesBadOptions) {
  EXPECT_THROW(NgramProposer({0, 3}), Error);
  EXPECT_THROW(NgramProposer({3, 2}), Error);
  EXPECT_NO_THROW(NgramProposer({1, 1}));
}

}  // namespace
}  // namespace weir
