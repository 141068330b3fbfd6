// WordPiece tokenizer: every case of llama.cpp's test-tokenizer-0 for the
// BERT (bge) vocabulary, run as that test runs them (no [CLS]/[SEP], special
// tokens not parsed), and hand-written cases whose expected ids are read off
// the vocabulary file: accents, CJK, punctuation, unknown words, specials,
// decoding, invalid UTF-8, and the greedy rule on a synthetic vocabulary.
#include "text/wpm_tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/gguf.h"
#include "json_lite.h"
#include "test_env.h"
#include "text/vocab.h"

namespace weir {
namespace {

std::string show(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

std::string bge_path() { return test::ref_dir() + "/vocab/ggml-vocab-bert-bge.gguf"; }

const Tokenizer* bge() {
  static const std::unique_ptr<Tokenizer> tok = []() -> std::unique_ptr<Tokenizer> {
    if (!std::filesystem::exists(bge_path())) return nullptr;
    return Tokenizer::from_gguf(GGUFFile::open(bge_path()));
  }();
  return tok.get();
}

#define REQUIRE_BGE(var)                                                               \
  if (!bge()) GTEST_SKIP() << "reference vocabulary not found: " << bge_path();      \
  const Tokenizer& var = *bge();

// llama.cpp's vocab test files: NAME.inp holds the texts, each followed by
// "\n__ggml_vocab_test__\n"; NAME.out holds one line per text, the expected
// ids each preceded by a space.
struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};
std::vector<VocabCase> read_vocab_cases(const std::string& gguf_path) {
  const std::string inp = test::json::read_file(gguf_path + ".inp");
  const std::string out = test::json::read_file(gguf_path + ".out");
  constexpr std::string_view kSep = "\n__ggml_vocab_test__\n";
  std::vector<VocabCase> cases;
  for (size_t start = 0, end; (end = inp.find(kSep, start)) != std::string::npos;
       start = end + kSep.size())
    cases.push_back({inp.substr(start, end - start), {}});
  size_t line_start = 0;
  for (VocabCase& c : cases) {
    const size_t line_end = out.find('\n', line_start);
    if (line_end == std::string::npos) {
      ADD_FAILURE() << gguf_path << ".out has fewer lines than .inp has texts";
      break;
    }
    const std::string line = out.substr(line_start, line_end - line_start);
    for (size_t p = 0; p < line.size();) {
      if (line[p] == ' ') {
        ++p;
        continue;
      }
      size_t q = line.find(' ', p);
      if (q == std::string::npos) q = line.size();
      c.ids.push_back(int32_t(std::stol(line.substr(p, q - p))));
      p = q;
    }
    line_start = line_end + 1;
  }
  return cases;
}

// ---------------------------------------------------------------------------
// llama.cpp's reference cases

TEST(WpmTokenizer, MatchesLlamaCppVocabTestForBertBge) {
  REQUIRE_BGE(tok);
  if (!std::filesystem::exists(bge_path() + ".inp") ||
      !std::filesystem::exists(bge_path() + ".out"))
    GTEST_SKIP() << "reference cases not found: " << bge_path() << ".inp/.out";
  const auto cases = read_vocab_cases(bge_path());
  ASSERT_EQ(cases.size(), 46u);
  int failures = 0;
  for (const VocabCase& c : cases) {
    const auto got = tok.encode(c.text, /*add_special=*/false, /*parse_special=*/false);
    if (got != c.ids) {
      ++failures;
      ADD_FAILURE() << "text \"" << c.text << "\"\n  want " << show(c.ids) << "\n  got  "
                    << show(got);
    }
  }
  EXPECT_EQ(failures, 0) << "of " << cases.size();
}

TEST(WpmTokenizer, BgeVocabularyFacts) {
  REQUIRE_BGE(tok);
  const Vocab& v = tok.vocab();
  EXPECT_EQ(v.model, "bert");
  EXPECT_EQ(v.n_tokens(), 30522);
  EXPECT_EQ(v.unk, 100);
  EXPECT_EQ(v.bos, 101);  // [CLS]
  EXPECT_EQ(v.sep, 102);
  EXPECT_EQ(v.text(101), "[CLS]");
  EXPECT_EQ(v.text(7592), "\xe2\x96\x81hello");  // a word start: "▁hello"
  EXPECT_EQ(v.text(2094), "d");                  // BERT's "##d"
  EXPECT_FALSE(v.add_space_prefix);
  EXPECT_FALSE(v.clean_spaces);
}

// ---------------------------------------------------------------------------
// Hand-written cases on the bge vocabulary; ids looked up in the file:
// 100 [UNK], 1002 ▁$, 1012 ▁., 1019 ▁5, 1031 ▁[, 1037 ▁a, 1038 ▁b,
// 1469 ▁ᄒ, 1855 ▁我, 1984 ▁ﬁ, 2088 ▁world, 7592 ▁hello, 7668 ▁cafe,
// 9960 ▁istanbul, 15743 ▁naive, 30102 €.

std::vector<int32_t> ids(std::initializer_list<int32_t> l) { return l; }

TEST(WpmTokenizer, LowerCasesAndDropsAccents) {
  REQUIRE_BGE(tok);
  EXPECT_EQ(tok.encode("HELLO", false, false), ids({7592}));
  EXPECT_EQ(tok.encode("Café", false, false), ids({7668}));
  EXPECT_EQ(tok.encode("NAÏVE", false, false), ids({15743}));
  // U+0130 decomposes to I + a combining dot; the I stays, lower-cased.
  EXPECT_EQ(tok.encode("\xc4\xb0stanbul", false, false), ids({9960}));
  // Only the canonical decomposition: the ligature U+FB01 stays itself.
  EXPECT_EQ(tok.encode("\xef\xac\x81", false, false), ids({1984}));
  // Each code point maps to its decomposition's first code point alone: a
  // Hangul syllable becomes its leading jamo (U+D55C -> U+1112).
  EXPECT_EQ(tok.encode("\xed\x95\x9c", false, false), ids({1469}));
  // A combining mark already in the text stays in the word; "▁cafe" matches
  // but U+0301 is no piece, so the whole word is unknown.
  EXPECT_EQ(tok.encode("cafe\xcc\x81", false, false), ids({100}));
}

TEST(WpmTokenizer, SplitsPunctuationAsciiSymbolsAndCjk) {
  REQUIRE_BGE(tok);
  EXPECT_EQ(tok.encode("a.b", false, false), ids({1037, 1012, 1038}));
  EXPECT_EQ(tok.encode("$5", false, false), ids({1002, 1019}));
  // A symbol past ASCII stays in its word: "▁5" then "€".
  EXPECT_EQ(tok.encode("5\xe2\x82\xac", false, false), ids({1019, 30102}));
  // Each ideograph is a word: 我 is "▁我"; 想 has no "▁想" and is unknown.
  EXPECT_EQ(tok.encode("\xe6\x88\x91\xe6\x83\xb3", false, false), ids({1855, 100}));
  EXPECT_EQ(tok.encode("a\xe6\x88\x91" "b", false, false), ids({1037, 1855, 1038}));
}

TEST(WpmTokenizer, WhitespaceAndControls) {
  REQUIRE_BGE(tok);
  EXPECT_EQ(tok.encode("  hello \t\n world  ", false, false), ids({7592, 2088}));
  // U+3000 and U+00A0 are White_Space.
  EXPECT_EQ(tok.encode("hello\xe3\x80\x80world", false, false), ids({7592, 2088}));
  EXPECT_EQ(tok.encode("hello\xc2\xa0world", false, false), ids({7592, 2088}));
  // Controls (Cc, Cf) and NUL vanish without splitting the word.
  EXPECT_EQ(tok.encode("hel\x01lo", false, false), ids({7592}));
  EXPECT_EQ(tok.encode(std::string("hel\0lo", 6), false, false), ids({7592}));
  EXPECT_EQ(tok.encode("hel\xe2\x80\x8dlo", false, false), ids({7592}));  // U+200D
  EXPECT_TRUE(tok.encode(" \t\n", false, false).empty());
  EXPECT_TRUE(tok.encode("", false, false).empty());
}

TEST(WpmTokenizer, UnknownWords) {
  REQUIRE_BGE(tok);
  EXPECT_EQ(tok.encode("\xf0\x9f\xa6\x99", false, false), ids({100}));  // 🦙
  // "▁hello" matches, the llama does not: the whole word is one [UNK].
  EXPECT_EQ(tok.encode("hello\xf0\x9f\xa6\x99 world", false, false), ids({100, 2088}));
}

TEST(WpmTokenizer, InvalidUtf8IsDropped) {
  REQUIRE_BGE(tok);
  EXPECT_EQ(tok.encode("hello\xff world", false, false), ids({7592, 2088}));
  EXPECT_EQ(tok.encode("hello\xc3", false, false), ids({7592}));       // cut short
  EXPECT_EQ(tok.encode("hel\x80lo", false, false), ids({7592}));       // lone continuation
  EXPECT_EQ(tok.encode("hel\xed\xa0\x80lo", false, false), ids({7592}));  // a surrogate
  EXPECT_EQ(tok.encode("hel\xf4\x90\x80\x80lo", false, false), ids({7592}));  // past U+10FFFF
}

TEST(WpmTokenizer, SpecialTokens) {
  REQUIRE_BGE(tok);
  EXPECT_EQ(tok.encode("hello", true, false), ids({101, 7592, 102}));
  EXPECT_EQ(tok.encode("", true, false), ids({101, 102}));
  EXPECT_EQ(tok.encode("[CLS]hello[SEP]", false, true), ids({101, 7592, 102}));
  // Not parsed: "[" is punctuation, a word of its own.
  const auto plain = tok.encode("[CLS]", false, false);
  ASSERT_FALSE(plain.empty());
  EXPECT_EQ(plain.front(), 1031);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 101), 0);
}

TEST(WpmTokenizer, DecodesWordStartsAsSpaces) {
  REQUIRE_BGE(tok);
  EXPECT_EQ(tok.decode(ids({7592, 2088})), " hello world");
  EXPECT_EQ(tok.decode(ids({29464, 2094, 1018})), " ied 4");  // ▁ie d ▁4
  EXPECT_EQ(tok.decode(ids({101, 7592, 102})), " hello");
  EXPECT_EQ(tok.decode(ids({101, 7592, 102}), true), "[CLS] hello[SEP]");
  EXPECT_EQ(tok.token_to_piece(100), "");
  EXPECT_EQ(tok.token_to_piece(100, true), "[UNK]");
}

// ---------------------------------------------------------------------------
// Synthetic vocabulary

Vocab tiny_vocab(std::optional<uint64_t> unk) {
  static constexpr std::string_view kTokens[] = {
      "[PAD]", "[UNK]", "\xe2\x96\x81un", "\xe2\x96\x81unaff", "able", "aff", "\xe2\x96\x81x", "a",
  };
  Vocab::Config cfg;
  cfg.model = "bert";
  cfg.unk = unk;
  std::vector<int32_t> types(std::size(kTokens), TOKEN_TYPE_NORMAL);
  types[0] = types[1] = TOKEN_TYPE_CONTROL;
  return Vocab::from_arrays(kTokens, {}, types, cfg);
}

TEST(WpmSynthetic, LongestPieceFirstFromTheLeft) {
  const WpmTokenizer tok(tiny_vocab(1));
  // "▁unaff" + "able", never "▁un" + "aff" + "able".
  EXPECT_EQ(tok.encode("unaffable", false, false), ids({3, 4}));
  EXPECT_EQ(tok.encode("unaaa", false, false), ids({2, 7, 7, 7}));
  EXPECT_EQ(tok.encode("unb x", false, false), ids({1, 6}));
  EXPECT_EQ(WpmTokenizer::split_words(" Un,aff\xc3\xa9 "),
            (std::vector<std::string>{"un", ",", "affe"}));
}

TEST(WpmSynthetic, NeedsAnUnknownToken) {
  EXPECT_THROW(WpmTokenizer(tiny_vocab(std::nullopt)), Error);  // the default, 100, is past the end
  EXPECT_NO_THROW(Tokenizer::from_vocab(tiny_vocab(1)));
}

}  // namespace
}  // namespace weir
