// Byte-level BPE: every reference case made with llama.cpp on the DeepSeek-R1
// Qwen vocabulary (ids and detokenized text), the pre-tokenizer splits that
// the regexes' documented behaviour fixes, every pre-tokenizer on hostile
// input, the merge rules on a synthetic vocabulary, and llama.cpp's
// clean-up of decoded spaces.
#include "text/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>

#include "core/error.h"
#include "core/gguf.h"
#include "json_lite.h"
#include "test_env.h"
#include "text/byte_unicode.h"
#include "text/pretokenizer.h"
#include "text/vocab.h"

namespace weir {
namespace {

using Ids = std::vector<int32_t>;
using Kind = PreTokenizer::Kind;

std::string show(const Ids& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

std::string escape(std::string_view s) {
  std::string o;
  for (unsigned char c : s) {
    if (c == '\n') o += "\\n";
    else if (c == '\t') o += "\\t";
    else if (c == '\r') o += "\\r";
    else if (c < 0x20 || c >= 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      o += b;
    } else o.push_back(char(c));
  }
  return o;
}

// ---------------------------------------------------------------------------
// The reference vocabulary, loaded once.

std::string qwen_path() { return test::ref_dir() + "/qwen2-vocab-deepseek-r1.gguf"; }

struct Loaded {
  std::unique_ptr<GGUFFile> file;
  std::unique_ptr<Tokenizer> tok;
};
const Loaded& qwen() {
  static const Loaded* loaded = [] {
    auto* l = new Loaded;
    if (!std::filesystem::exists(qwen_path())) return l;
    l->file = std::make_unique<GGUFFile>(GGUFFile::open(qwen_path()));
    l->tok = Tokenizer::from_gguf(*l->file);
    return l;
  }();
  return *loaded;
}

#define REQUIRE_QWEN(var)                                                              \
  if (!qwen().tok) GTEST_SKIP() << "reference vocabulary not found: " << qwen_path(); \
  const Tokenizer& var = *qwen().tok;

// The qwen2 vocabulary and merges under another pre-tokenizer.
std::unique_ptr<BpeTokenizer> qwen_with(std::string_view pre) {
  Vocab v = Vocab::from_gguf(*qwen().file);
  v.pre = std::string(pre);
  return std::make_unique<BpeTokenizer>(std::move(v),
                                        qwen().file->get_str_array("tokenizer.ggml.merges"));
}

struct RefCase {
  std::string text, detok;
  bool add_bos, parse_special;
  Ids ids;
};
std::vector<RefCase> ref_cases() {
  std::vector<RefCase> out;
  for (const auto& v : test::json::read_jsonl(test::ref_dir() + "/qwen2-tokenize.public.jsonl"))
    out.push_back({v["text"].as_string(), v["detok"].as_string(), v["add_bos"].as_bool(),
                   v["parse_special"].as_bool(), v["ids"].as_int_vector<int32_t>()});
  return out;
}

// ---------------------------------------------------------------------------
// Against llama.cpp

TEST(BpeTokenizer, MatchesLlamaCppOnEveryReferenceCase) {
  REQUIRE_QWEN(tok);
  const auto cases = ref_cases();
  ASSERT_GE(cases.size(), 50u);
  int failures = 0;
  for (const RefCase& c : cases) {
    const Ids got = tok.encode(c.text, c.add_bos, c.parse_special);
    if (got != c.ids) {
      ++failures;
      ADD_FAILURE() << "text \"" << escape(c.text) << "\" add_bos=" << c.add_bos
                    << " parse_special=" << c.parse_special << "\n  want " << show(c.ids)
                    << "\n  got  " << show(got);
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(BpeTokenizer, ReferenceIdsDetokenizeAsLlamaCpp) {
  REQUIRE_QWEN(tok);
  for (const RefCase& c : ref_cases()) {
    // detok was made with special tokens rendered (BOS shows as its text).
    EXPECT_EQ(tok.decode(c.ids, true), c.detok) << escape(c.text);
    Ids body = c.ids;
    if (c.add_bos) body.erase(body.begin());
    EXPECT_EQ(tok.decode(body), c.text) << escape(c.text);
  }
}

TEST(BpeTokenizer, RoundTripsEveryReferenceText) {
  REQUIRE_QWEN(tok);
  for (const RefCase& c : ref_cases())
    EXPECT_EQ(tok.decode(tok.encode(c.text, false, false)), c.text) << escape(c.text);
}

TEST(BpeTokenizer, QwenVocabularyFacts) {
  REQUIRE_QWEN(tok);
  const Vocab& v = tok.vocab();
  EXPECT_EQ(v.model, "gpt2");
  EXPECT_EQ(v.pre, "deepseek-r1-qwen");
  EXPECT_EQ(v.n_tokens(), 152064);
  EXPECT_EQ(v.bos, 151646);
  EXPECT_EQ(v.eos, 151643);
  EXPECT_TRUE(v.add_bos);
  EXPECT_FALSE(v.add_eos);
  EXPECT_FALSE(v.add_space_prefix);
  EXPECT_FALSE(v.clean_spaces);  // llama.cpp turns it off for qwen2
  const auto& bpe = dynamic_cast<const BpeTokenizer&>(tok);
  EXPECT_EQ(bpe.pretokenizer().kind(), Kind::Qwen2);
  EXPECT_FALSE(bpe.pretokenizer().ignore_merges());
  EXPECT_LE(bpe.n_merges(), 151387u);
  EXPECT_GT(bpe.n_merges(), 151000u);
  // Byte-level pieces: "Ġ" is the space, "Ċ" the newline.
  EXPECT_EQ(v.find("\xc4\xa0world"), 1879);
  EXPECT_EQ(tok.token_to_piece(1879), " world");
  EXPECT_EQ(tok.token_to_piece(151646), "");
  EXPECT_EQ(tok.token_to_piece(151646, true), "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
  EXPECT_EQ(tok.token_to_piece(151648), "<think>");  // USER_DEFINED: rendered always
  EXPECT_THROW(tok.token_to_piece(-1), Error);
  EXPECT_THROW(tok.token_to_piece(152064), Error);
  // Special tokens only with parse_special; "<think>" (USER_DEFINED) always.
  EXPECT_EQ(tok.encode("<\xef\xbd\x9cUser\xef\xbd\x9c>hi", false, true).front(), 151644);
  EXPECT_NE(tok.encode("<\xef\xbd\x9cUser\xef\xbd\x9c>hi", false, false).front(), 151644);
  EXPECT_EQ(tok.encode("<think>", false, false), Ids{151648});
  // Around special tokens the text tokenizes as in the reference ("Hello
  // world" -> 9707, 1879).
  EXPECT_EQ(tok.encode("<\xef\xbd\x9cUser\xef\xbd\x9c>Hello world<\xef\xbd\x9c"
                       "Assistant\xef\xbd\x9c>",
                       true, true),
            (Ids{151646, 151644, 9707, 1879, 151645}));
}

// A whole text encoded and decoded back (its build and encode times:
// microbench/text_bench.cpp).
TEST(BpeTokenizer, WholeTextRoundTrips) {
  REQUIRE_QWEN(tok);
  const std::string text = test::json::read_file(test::ref_dir() + "/ppl-text.txt");
  const Ids ids = tok.encode(text, false, false);
  EXPECT_EQ(tok.decode(ids), text);
}

// ---------------------------------------------------------------------------
// Pre-tokenizer splits. Expected words follow from the published regexes
// (GPT-2's encoder.py, Llama 3's and Qwen2's tokenizer.json) read by hand.

std::vector<std::string> words(Kind kind, std::string_view text) {
  static std::map<Kind, PreTokenizer> pre;
  auto it = pre.try_emplace(kind, kind).first;
  std::vector<WordSpan> spans;
  it->second.split(text, spans);
  std::vector<std::string> out;
  for (const WordSpan& w : spans) out.emplace_back(text.substr(w.offset, w.length));
  return out;
}
using W = std::vector<std::string>;

TEST(PreTokenizer, NamesAsLlamaCpp) {
  EXPECT_EQ(PreTokenizer::kind_for("llama-bpe"), Kind::Llama3);
  EXPECT_EQ(PreTokenizer::kind_for("llama3"), Kind::Llama3);
  EXPECT_EQ(PreTokenizer::kind_for("qwen2"), Kind::Qwen2);
  EXPECT_EQ(PreTokenizer::kind_for("deepseek-r1-qwen"), Kind::Qwen2);
  EXPECT_EQ(PreTokenizer::kind_for("gpt-2"), Kind::Gpt2);
  EXPECT_EQ(PreTokenizer::kind_for("gpt2"), Kind::Gpt2);
  EXPECT_EQ(PreTokenizer::kind_for(""), Kind::Default);
  EXPECT_EQ(PreTokenizer::kind_for("default"), Kind::Default);
  EXPECT_EQ(PreTokenizer::kind_for("falcon"), Kind::Falcon);
  EXPECT_EQ(PreTokenizer::kind_for("mpt"), Kind::Gpt2);
  EXPECT_EQ(PreTokenizer::kind_for("olmo"), Kind::Gpt2);
  EXPECT_EQ(PreTokenizer::kind_for("starcoder"), Kind::Starcoder);
  EXPECT_EQ(PreTokenizer::kind_for("refact"), Kind::Starcoder);
  EXPECT_EQ(PreTokenizer::kind_for("command-r"), Kind::Starcoder);
  EXPECT_EQ(PreTokenizer::kind_for("smollm"), Kind::Starcoder);
  EXPECT_EQ(PreTokenizer::kind_for("deepseek-coder"), Kind::DeepseekCoder);
  EXPECT_EQ(PreTokenizer::kind_for("deepseek-llm"), Kind::DeepseekLlm);
  EXPECT_EQ(PreTokenizer::kind_for("stablelm2"), Kind::Qwen2);
  EXPECT_EQ(PreTokenizer::kind_for("dbrx"), Kind::Llama3);
  // llama.cpp's ignore_merges goes with the llama3 names, not with dbrx or glm4.
  EXPECT_TRUE(PreTokenizer::lookup("llama-bpe").ignore_merges);
  EXPECT_TRUE(PreTokenizer::lookup("falcon3").ignore_merges);
  EXPECT_FALSE(PreTokenizer::lookup("dbrx").ignore_merges);
  EXPECT_FALSE(PreTokenizer::lookup("glm4").ignore_merges);
  EXPECT_FALSE(PreTokenizer::lookup("falcon").ignore_merges);
  EXPECT_FALSE(PreTokenizer::lookup("").ignore_merges);
  for (const PreTokenizer::Name& n : PreTokenizer::known_names()) {
    EXPECT_EQ(PreTokenizer::lookup(n.pre).kind, n.kind) << n.pre;
    EXPECT_NO_THROW(PreTokenizer{n}) << n.pre;  // its regexes compile
  }
  try {
    PreTokenizer::kind_for("tekken-ish");
    ADD_FAILURE() << "no error for an unknown pre-tokenizer";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("tokenizer.ggml.pre"), std::string::npos) << m;
    EXPECT_NE(m.find("tekken-ish"), std::string::npos) << m;
    // ... and lists the names weir knows.
    for (const PreTokenizer::Name& n : PreTokenizer::known_names())
      EXPECT_NE(m.find("\"" + std::string(n.pre) + "\""), std::string::npos) << n.pre;
  }
}

TEST(PreTokenizer, Contractions) {
  // GPT-2: lower case only.
  EXPECT_EQ(words(Kind::Gpt2, "it's don't we're I'm"),
            (W{"it", "'s", " don", "'t", " we", "'re", " I", "'m"}));
  EXPECT_EQ(words(Kind::Gpt2, "DON'T"), (W{"DON", "'", "T"}));
  // Llama 3 / Qwen2: any case.
  for (Kind k : {Kind::Llama3, Kind::Qwen2}) {
    EXPECT_EQ(words(k, "it's DON'T they'VE we'll"),
              (W{"it", "'s", " DON", "'T", " they", "'VE", " we", "'ll"}));
    // Not a contraction: the quote joins the letters after it.
    EXPECT_EQ(words(k, "'tis 'x"), (W{"'t", "is", " '", "x"}));
  }
}

TEST(PreTokenizer, Numbers) {
  EXPECT_EQ(words(Kind::Gpt2, "2024 1234567"), (W{"2024", " 1234567"}));
  EXPECT_EQ(words(Kind::Llama3, "1234567 12"), (W{"123", "456", "7", " ", "12"}));
  EXPECT_EQ(words(Kind::Qwen2, "1234 5"), (W{"1", "2", "3", "4", " ", "5"}));
  // \p{N}, not just ASCII digits: Arabic-Indic digits, superscript two.
  EXPECT_EQ(words(Kind::Llama3, "\xd9\xa1\xd9\xa2\xd9\xa3\xd9\xa4"),
            (W{"\xd9\xa1\xd9\xa2\xd9\xa3", "\xd9\xa4"}));
  EXPECT_EQ(words(Kind::Qwen2, "x\xc2\xb2"), (W{"x", "\xc2\xb2"}));
}

TEST(PreTokenizer, Whitespace) {
  for (Kind k : {Kind::Gpt2, Kind::Llama3, Kind::Qwen2}) {
    // \s+(?!\S): a run gives all but its last space; that one starts the word.
    EXPECT_EQ(words(k, "a   b"), (W{"a", "  ", " b"})) << PreTokenizer::name(k);
    EXPECT_EQ(words(k, "end   "), (W{"end", "   "})) << PreTokenizer::name(k);
  }
  // GPT-2 has no newline rule: each newline before a word stands alone.
  EXPECT_EQ(words(Kind::Gpt2, "a\n\nb"), (W{"a", "\n", "\n", "b"}));
  // Llama 3 / Qwen2: \s*[\r\n]+ takes the run, trailing spaces included.
  for (Kind k : {Kind::Llama3, Kind::Qwen2}) {
    EXPECT_EQ(words(k, "a\n\nb"), (W{"a", "\n\n", "b"}));
    EXPECT_EQ(words(k, "a \r\n  \n b"), (W{"a", " \r\n  \n", " b"}));
    EXPECT_EQ(words(k, "x\t\ty"), (W{"x", "\t", "\ty"}));
    // No-break spaces are whitespace.
    EXPECT_EQ(words(k, "a\xc2\xa0\xc2\xa0" "b"), (W{"a", "\xc2\xa0", "\xc2\xa0" "b"}));
    // U+180E is not White_Space (PCRE2's own \s would take it).
    EXPECT_EQ(words(k, "x\xe1\xa0\x8e\xe1\xa0\x8ey"), (W{"x", "\xe1\xa0\x8e\xe1\xa0\x8e", "y"}));
  }
}

TEST(PreTokenizer, PunctuationLettersCjkEmoji) {
  EXPECT_EQ(words(Kind::Gpt2, "Hello, world!!"), (W{"Hello", ",", " world", "!!"}));
  for (Kind k : {Kind::Llama3, Kind::Qwen2}) {
    EXPECT_EQ(words(k, "Hello, world!!"), (W{"Hello", ",", " world", "!!"}));
    // Punctuation takes the newlines after it.
    EXPECT_EQ(words(k, "ok.\n\nNext"), (W{"ok", ".\n\n", "Next"}));
    // One non-letter may lead a word: "(x", "$y".
    EXPECT_EQ(words(k, "f(x) $y"), (W{"f", "(x", ")", " $", "y"}));
    // CJK ideographs are letters: one word, with its leading space.
    EXPECT_EQ(words(k, "\xe4\xbd\xa0\xe5\xa5\xbd \xe4\xb8\x96\xe7\x95\x8c"),
              (W{"\xe4\xbd\xa0\xe5\xa5\xbd", " \xe4\xb8\x96\xe7\x95\x8c"}));
    // Emoji (So) and a skin-tone modifier (Sk) are punctuation-like.
    EXPECT_EQ(words(k, "hi \xf0\x9f\x91\x8b\xf0\x9f\x8f\xbd!"),
              (W{"hi", " \xf0\x9f\x91\x8b\xf0\x9f\x8f\xbd!"}));
  }
}

TEST(PreTokenizer, DefaultCascade) {
  // llama.cpp's "default": punctuation runs first, then the GPT-2 regex on
  // what is left, then digit runs, then groups of three ASCII digits.
  EXPECT_EQ(words(Kind::Default, "Hi, you!"), (W{"Hi", ",", " you", "!"}));
  EXPECT_EQ(words(Kind::Default, "x 12345"), (W{"x", " ", "123", "45"}));
}

// The cascades of falcon, starcoder and DeepSeek, read by hand from their
// regexes (llama.cpp's llm_tokenizer_bpe, the models' tokenizer.json).
TEST(PreTokenizer, FalconStarcoderDeepseekCascades) {
  // falcon: punctuation runs (backquote too), GPT-2's, then digits in threes.
  EXPECT_EQ(words(Kind::Falcon, "Hi, you`x 12345"),
            (W{"Hi", ",", " you", "`", "x", " ", "123", "45"}));
  // starcoder: every digit alone, then GPT-2's.
  EXPECT_EQ(words(Kind::Starcoder, "x 2024ab"), (W{"x", " ", "2", "0", "2", "4", "ab"}));
  // deepseek-coder: line breaks, letters, punctuation (one white space before
  // them), CJK runs, single digits.
  EXPECT_EQ(words(Kind::DeepseekCoder, "a\nb, 12"), (W{"a", "\n", "b", ",", " ", "1", "2"}));
  // deepseek-llm: listed letters, ASCII and full-width punctuation, trailing
  // white space, digit runs.
  EXPECT_EQ(words(Kind::DeepseekLlm, "Hello,  world!\n"),
            (W{"Hello", ",", " ", " world", "!", "\n"}));
  EXPECT_EQ(words(Kind::DeepseekLlm, "abc 12345"), (W{"abc", " ", "12345"}));
}

TEST(PreTokenizer, DeepseekRangesLeaveOutNonAsciiWhiteSpace) {
  // U+3000 (ideographic space) lies inside "[ࠀ-一]" and "[　-。]", but
  // llama.cpp matches those on text where non-ASCII white space is U+000B:
  // it is a word of its own, not part of the run.
  const std::string ideographic_space = "\xe3\x80\x80", arrow = "\xe2\x86\x90";  // U+2190
  EXPECT_EQ(words(Kind::DeepseekCoder, ideographic_space + arrow), (W{ideographic_space, arrow}));
  const std::string stops = "\xe3\x80\x82\xe3\x80\x82";  // two U+3002
  EXPECT_EQ(words(Kind::DeepseekLlm, stops + ideographic_space), (W{stops, ideographic_space}));
  // The punctuation regex takes it as the white space before "。", but the
  // CJK regex after it splits that word again and leaves U+3000 out.
  EXPECT_EQ(words(Kind::DeepseekLlm, "a" + ideographic_space + "\xe3\x80\x82"),
            (W{"a", ideographic_space, "\xe3\x80\x82"}));
}

TEST(PreTokenizer, InvalidUtf8SplitsAsReplacementCharacters) {
  // Each bad byte is one U+FFFD for matching (a symbol, like "!"), and the
  // words keep the original bytes.
  EXPECT_EQ(words(Kind::Qwen2, "ab\xff\xfe cd"), (W{"ab", "\xff\xfe", " cd"}));
  EXPECT_EQ(words(Kind::Qwen2, "\xe2\x82 x"), (W{"\xe2\x82", " x"}));
  EXPECT_EQ(words(Kind::Gpt2, " \x80y"), (W{" \x80", "y"}));
  // Words always cover the input exactly.
  std::mt19937 rng(7);
  for (int iter = 0; iter < 200; ++iter) {
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = char(rng());
    for (Kind k : {Kind::Default, Kind::Gpt2, Kind::Llama3, Kind::Qwen2}) {
      std::string joined;
      for (const std::string& w : words(k, s)) {
        ASSERT_FALSE(w.empty());
        joined += w;
      }
      ASSERT_EQ(joined, s) << escape(s);
    }
  }
}

// ---------------------------------------------------------------------------
// Every pre-tokenizer with the real vocabulary, on hostile input.

std::vector<std::string> tricky_strings() {
  std::vector<std::string> v = {
      "", "\xff", "\xc3", "\xc3(", "\xe2\x96", "abc\xe2", "\x80\x80\x80", "\xf0\x9f\x98",
      "\xed\xa0\x80", "\xc0\xaf", "x\xf8\x88\x80\x80\x80y", std::string("\0a\0", 3),
      "\xef\xbb\xbf" "BOM", "\xf4\x90\x80\x80", "<think>\xff</think>",
      "\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c\xef\xbc\x81",
      "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 family",
      "it's 12345678 DON'T\r\n\r\n  x", "a ' b , c . d 's",
  };
  v.push_back(std::string(100000, ' '));
  v.push_back(std::string(50000, '\n'));
  std::string mixed;
  for (int i = 0; i < 5000; ++i) mixed += " \t\n\xc2\xa0";
  v.push_back(mixed + "end");
  v.push_back(std::string(20000, 'a'));
  std::mt19937 rng(42);
  for (int seed = 0; seed < 3; ++seed) {
    std::string r(10 * 1024, '\0');
    for (char& c : r) c = char(rng());
    v.push_back(r);
  }
  return v;
}

TEST(BpeTokenizer, EveryPreTokenizerIsLosslessOnHostileInput) {
  REQUIRE_QWEN(unused);
  (void)unused;
  const auto inputs = tricky_strings();
  for (std::string_view pre : {"qwen2", "llama-bpe", "gpt-2", "", "falcon", "starcoder",
                               "deepseek-llm", "deepseek-coder"}) {
    const auto tok = qwen_with(pre);
    for (const std::string& s : inputs) {
      for (bool ps : {false, true}) {
        Ids ids;
        ASSERT_NO_THROW(ids = tok->encode(s, false, ps)) << pre << ": " << escape(s.substr(0, 40));
        std::string pieces;
        for (int32_t id : ids) {
          ASSERT_TRUE(tok->vocab().valid(id));
          pieces += tok->token_to_piece(id);
        }
        EXPECT_EQ(pieces, s) << pre << ": " << escape(s.substr(0, 40));
      }
    }
  }
}

TEST(BpeTokenizer, Llama3TakesWholeWordTokensWithoutMerging) {
  REQUIRE_QWEN(unused);
  (void)unused;
  // llama.cpp's ignore_merges: a word that is a token is that token.
  const auto tok = qwen_with("llama-bpe");
  ASSERT_TRUE(tok->pretokenizer().ignore_merges());
  const Vocab& v = tok->vocab();
  int checked = 0;
  for (int32_t id = 0; id < 151643; id += 97) {
    const std::string bytes = tok->token_to_piece(id);
    if (v.find(v.text(id)) != id) continue;  // duplicate text: the later id wins
    Ids got;
    tok->encode_word(bytes, got);
    EXPECT_EQ(got, Ids{id}) << escape(bytes);
    ++checked;
  }
  EXPECT_GT(checked, 1000);
}

// ---------------------------------------------------------------------------
// Merge rules on a synthetic vocabulary: 256 byte characters, then a few merges.

struct Synth {
  std::vector<std::string> toks;
  std::vector<std::string_view> merges;
  std::unique_ptr<BpeTokenizer> tok;
  int32_t id(std::string_view t) const { return tok->vocab().find(t); }
};
Synth synth(std::vector<std::string_view> merges, std::vector<std::string> extra,
            std::string pre = "gpt2") {
  Synth s;
  for (int b = 0; b < 256; ++b) s.toks.emplace_back(byte_to_unicode(uint8_t(b)));
  for (auto& e : extra) s.toks.push_back(e);
  s.toks.push_back("<|endoftext|>");
  std::vector<std::string_view> views(s.toks.begin(), s.toks.end());
  std::vector<int32_t> types(views.size(), TOKEN_TYPE_NORMAL);
  types.back() = TOKEN_TYPE_CONTROL;
  Vocab::Config cfg;
  cfg.model = "gpt2";
  cfg.pre = pre;
  cfg.eos = uint64_t(views.size() - 1);
  s.merges = std::move(merges);
  s.tok = std::make_unique<BpeTokenizer>(Vocab::from_arrays(views, {}, types, cfg), s.merges);
  return s;
}

TEST(BpeSynthetic, LowestRankFirstLeftmostOnTies) {
  {
    Synth s = synth({"a b", "b c", "ab c"}, {"ab", "bc", "abc"});
    EXPECT_EQ(s.tok->encode("abc", false, false), Ids{s.id("abc")});
  }
  {
    Synth s = synth({"b c", "a b", "ab c"}, {"ab", "bc", "abc"});
    EXPECT_EQ(s.tok->encode("abc", false, false), (Ids{s.id("a"), s.id("bc")}));
  }
  {
    Synth s = synth({"a a"}, {"aa"});
    EXPECT_EQ(s.tok->encode("aaa", false, false), (Ids{s.id("aa"), s.id("a")}));
    EXPECT_EQ(s.tok->encode("aaaa", false, false), (Ids{s.id("aa"), s.id("aa")}));
  }
  {
    // A later duplicate of a merge does not change its rank.
    Synth s = synth({"b c", "a b", "b c"}, {"ab", "bc"});
    EXPECT_EQ(s.tok->encode("abc", false, false), (Ids{s.id("a"), s.id("bc")}));
  }
}

TEST(BpeSynthetic, SpacesAndBytesUseTheByteAlphabet) {
  // "Ġ" (U+0120) stands for the space byte.
  Synth s = synth({"\xc4\xa0 a"}, {"\xc4\xa0" "a"});
  EXPECT_EQ(s.tok->encode("a a", false, false), (Ids{s.id("a"), s.id("\xc4\xa0" "a")}));
  EXPECT_EQ(s.tok->encode("\xff", false, false), Ids{s.id("\xc3\xbf")});
  const std::string bytes("x\xff\0 a", 5);
  EXPECT_EQ(s.tok->decode(s.tok->encode(bytes, false, false)), bytes);
  EXPECT_EQ(byte_to_unicode(' '), "\xc4\xa0");
  EXPECT_EQ(byte_to_unicode('\n'), "\xc4\x8a");
  EXPECT_EQ(byte_to_unicode('A'), "A");
  EXPECT_EQ(byte_to_unicode(0xAD), "\xc5\x83");  // the 68th (last) moved byte: U+0143
  EXPECT_EQ(unicode_to_byte(0x143), 0xAD);
  EXPECT_EQ(unicode_to_byte(0x144), -1);
}

TEST(BpeSynthetic, PieceOutsideTheByteAlphabetIsMarkedAsLlamaCpp) {
  // U+20AC is no byte's character: llama.cpp writes [UNK_BYTE_0x<utf8><text>].
  Synth s = synth({}, {"x\xe2\x82\xac"});
  EXPECT_EQ(s.tok->token_to_piece(s.id("x\xe2\x82\xac")), "x[UNK_BYTE_0xe282acx\xe2\x82\xac]");
}

TEST(BpeSynthetic, MergeIntoANonTokenFallsBackToBytes) {
  // "a b" merges, but "ab" is no token: the bytes' tokens come out.
  Synth s = synth({"a b", "ab c"}, {"abc"});
  EXPECT_EQ(s.tok->encode("ab", false, false), (Ids{s.id("a"), s.id("b")}));
  // Through the non-token "ab", "abc" is reached (llama.cpp ranks by text).
  EXPECT_EQ(s.tok->encode("abc", false, false), Ids{s.id("abc")});
}

TEST(BpeSynthetic, SpecialsBosEosAndErrors) {
  Synth s = synth({}, {});
  const int32_t eot = s.id("<|endoftext|>");
  EXPECT_EQ(s.tok->encode("a<|endoftext|>", false, true), (Ids{s.id("a"), eot}));
  EXPECT_NE(s.tok->encode("a<|endoftext|>", false, false).back(), eot);
  EXPECT_EQ(s.tok->vocab().bos, 11);  // llama.cpp's BPE default
  EXPECT_FALSE(s.tok->vocab().add_bos);
  EXPECT_EQ(s.tok->encode("a", true, false), Ids{s.id("a")});
  EXPECT_THROW(synth({}, {}, "no-such-pre"), Error);
  EXPECT_THROW(Tokenizer::from_vocab(Vocab(s.tok->vocab())), Error);  // no merges
  // llama3 adds BOS by default.
  Synth l = synth({}, {}, "llama-bpe");
  EXPECT_TRUE(l.tok->vocab().add_bos);
  EXPECT_EQ(l.tok->encode("a", true, false), (Ids{11, l.id("a")}));
}

TEST(BpeSynthetic, DecodeCleansSpacesAsLlamaCppForGpt2) {
  Synth s = synth({}, {});
  EXPECT_TRUE(s.tok->vocab().clean_spaces);
  const std::string text = "Hi , you ! it 's I 'm we 're they 've don 't he 'd you 'll a ' b .";
  EXPECT_EQ(s.tok->decode(s.tok->encode(text, false, false)),
            "Hi, you! it's I'm we're they've don 't he 'd you 'll a'b.");
  EXPECT_FALSE(synth({}, {}, "qwen2").tok->vocab().clean_spaces);
}

TEST(CleanUpSpaces, LlamaCppRules) {
  EXPECT_EQ(clean_up_spaces(""), "");
  EXPECT_EQ(clean_up_spaces(" ."), ".");
  EXPECT_EQ(clean_up_spaces("a , b . c ? d !"), "a, b. c? d!");
  EXPECT_EQ(clean_up_spaces("a ' b"), "a'b");
  EXPECT_EQ(clean_up_spaces("a ' 's"), "a''s");  // the dropped space no longer counts
  EXPECT_EQ(clean_up_spaces("x 's x 'm x 're x 've"), "x's x'm x're x've");
  EXPECT_EQ(clean_up_spaces("x 't x 'd x 'll x 'q x '"), "x 't x 'd x 'll x 'q x '");
  EXPECT_EQ(clean_up_spaces("x 'r"), "x 'r");  // needs both letters
}

}  // namespace
}  // namespace weir
