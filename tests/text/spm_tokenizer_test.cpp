// SentencePiece tokenizer and vocabulary: every reference case made with
// llama.cpp on the real Gemma 3 vocab, the behaviours the reference README
// lists, round trips, invalid UTF-8, streaming, and vocab errors.
#include "text/spm_tokenizer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/error.h"
#include "core/gguf.h"
#include "json_lite.h"
#include "test_env.h"
#include "text/utf8_streamer.h"
#include "text/vocab.h"

namespace weir {
namespace {

// ---------------------------------------------------------------------------
// Helpers

std::string show(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

// What decoding gives back: the text, with a literal U+2581 read as a space.
std::string as_decoded(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s.substr(i, 3) == "\xe2\x96\x81") {
      out.push_back(' ');
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::string escape(std::string_view s) {
  std::string o;
  for (unsigned char c : s) {
    if (c == '\n') o += "\\n";
    else if (c == '\t') o += "\\t";
    else if (c == '\r') o += "\\r";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      o += b;
    } else o.push_back(char(c));
  }
  return o;
}

// The real model's tokenizer, loaded once for all tests.
struct Loaded {
  std::unique_ptr<Tokenizer> tok;
};
const Loaded* model_tokenizer() {
  static const Loaded* loaded = [] {
    auto* l = new Loaded;
    const std::string path = test::model_path();
    if (path.empty() || !std::filesystem::exists(path)) return l;
    l->tok = Tokenizer::from_gguf(GGUFFile::open(path));
    return l;
  }();
  return loaded;
}

#define REQUIRE_TOKENIZER(var)                                    \
  WEIR_REQUIRE_MODEL(model_path_);                                \
  const Tokenizer& var = *model_tokenizer()->tok;

struct RefCase {
  std::string text;
  bool add_bos, parse_special;
  std::vector<int32_t> ids;
};
std::vector<RefCase> ref_cases() {
  std::vector<RefCase> out;
  for (const auto& v : test::json::read_jsonl(test::ref_dir() + "/gemma3-tokenize.public.jsonl"))
    out.push_back({v["text"].as_string(), v["add_bos"].as_bool(), v["parse_special"].as_bool(),
                   v["ids"].as_int_vector<int32_t>()});
  return out;
}

// ---------------------------------------------------------------------------
// Real Gemma 3 vocabulary

TEST(SpmTokenizer, MatchesLlamaCppOnEveryReferenceCase) {
  REQUIRE_TOKENIZER(tok);
  const auto cases = ref_cases();
  ASSERT_GE(cases.size(), 40u);
  int failures = 0;
  for (const RefCase& c : cases) {
    const auto got = tok.encode(c.text, c.add_bos, c.parse_special);
    if (got != c.ids) {
      ++failures;
      ADD_FAILURE() << "text \"" << escape(c.text) << "\" add_bos=" << c.add_bos
                    << " parse_special=" << c.parse_special << "\n  want " << show(c.ids)
                    << "\n  got  " << show(got);
    }
  }
  EXPECT_EQ(failures, 0);
}

// The prompts of the generation and logit references (BOS + special parsing,
// one of 699 tokens) tokenize as llama.cpp did.
TEST(SpmTokenizer, MatchesLlamaCppOnGenerationPrompts) {
  REQUIRE_TOKENIZER(tok);
  int n = 0;
  for (const char* file : {"gemma3-greedy.jsonl", "gemma3-logits.jsonl"}) {
    for (const auto& c : test::json::read_jsonl(test::ref_dir() + "/" + file)) {
      const auto want = c[c.has("prompt_ids") ? "prompt_ids" : "ids"].as_int_vector<int32_t>();
      const auto got = tok.encode(c["prompt"].as_string(), true, true);
      EXPECT_EQ(got, want) << file << ": \"" << escape(c["prompt"].as_string()).substr(0, 60) << "\"";
      ++n;
    }
  }
  EXPECT_EQ(n, 11);
}

TEST(SpmTokenizer, ReferenceIdsDecodeToTheText) {
  REQUIRE_TOKENIZER(tok);
  for (const RefCase& c : ref_cases()) {
    EXPECT_EQ(tok.decode(c.ids), c.text) << escape(c.text);
    // Without specials every text round-trips through our own encoding.
    EXPECT_EQ(tok.decode(tok.encode(c.text, false, false)), c.text) << escape(c.text);
  }
}

TEST(SpmTokenizer, StreamingPiecesGivesTheSameText) {
  REQUIRE_TOKENIZER(tok);
  for (const RefCase& c : ref_cases()) {
    Utf8Streamer s;
    std::string text;
    for (int32_t id : c.ids) {
      const std::string part = s.push(tok.token_to_piece(id));
      EXPECT_TRUE(is_valid_utf8(part));
      text += part;
    }
    text += s.flush();
    EXPECT_EQ(text, c.text) << escape(c.text);
  }
}

TEST(SpmTokenizer, GemmaVocabularyFacts) {
  REQUIRE_TOKENIZER(tok);
  const Vocab& v = tok.vocab();
  EXPECT_EQ(v.model, "llama");
  EXPECT_EQ(v.n_tokens(), 262144);
  EXPECT_EQ(v.bos, 2);
  EXPECT_EQ(v.eos, 1);
  EXPECT_EQ(v.unk, 3);
  EXPECT_EQ(v.pad, 0);
  EXPECT_EQ(v.eot, 106);
  EXPECT_TRUE(v.add_bos);
  EXPECT_FALSE(v.add_eos);
  EXPECT_FALSE(v.add_space_prefix);
  EXPECT_EQ(v.eog, (std::vector<int32_t>{1, 106, 212}));
  EXPECT_TRUE(v.is_eog(212));
  EXPECT_FALSE(v.is_eog(2));
  // "</s>" is USER_DEFINED in the file; llama.cpp adds CONTROL.
  EXPECT_EQ(v.types[212], TOKEN_TYPE_USER_DEFINED);
  EXPECT_TRUE(v.is_control(212));
  EXPECT_TRUE(v.has_attr(212, TOKEN_ATTR_USER_DEFINED));
  // Byte fallback: ids 238..493 are <0x00>..<0xFF>.
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(v.byte_to_token(uint8_t(b)), 238 + b);
    EXPECT_EQ(v.byte_value(238 + b), b);
  }
  EXPECT_EQ(v.find("\xe2\x96\x81Hello"), 26352);
  EXPECT_EQ(v.find("Hello"), 9259);
  EXPECT_EQ(v.find("no such token, surely"), TOKEN_NULL);
  // 165 USER_DEFINED tokens; the cache holds them and the control tokens,
  // longest first.
  size_t n_user = 0;
  for (int32_t id = 0; id < v.n_tokens(); ++id) n_user += v.types[size_t(id)] == TOKEN_TYPE_USER_DEFINED;
  EXPECT_EQ(n_user, 165u);
  for (size_t i = 1; i < v.special_tokens.size(); ++i)
    EXPECT_GE(v.text(v.special_tokens[i - 1]).size(), v.text(v.special_tokens[i]).size());
}

TEST(SpmTokenizer, ReadmeBehaviours) {
  REQUIRE_TOKENIZER(tok);
  using V = std::vector<int32_t>;
  EXPECT_EQ(tok.encode("", true, true), V{2});
  EXPECT_EQ(tok.encode("", false, true), V{});
  EXPECT_EQ(tok.encode("<bos>Hello", true, true), (V{2, 2, 9259}));
  EXPECT_EQ(tok.encode("Hello", false, true), V{9259});  // no space prefix
  EXPECT_EQ(tok.encode(" Hello", false, true), V{26352});
  // USER_DEFINED runs of spaces are matched before SPM, with or without
  // special parsing; "world" then starts a fragment and gets no U+2581.
  EXPECT_EQ(tok.encode("Hello   world", false, true), (V{9259, 139, 12392}));
  EXPECT_EQ(tok.encode("Hello   world", false, false), (V{9259, 139, 12392}));
  EXPECT_EQ(tok.encode("a\n\nb", false, false), (V{236746, 108, 236763}));
  // A literal U+2581 tokenizes like a space.
  EXPECT_EQ(tok.encode("\xe2\x96\x81Hello", false, false), tok.encode(" Hello", false, false));
  // Digits one per token.
  EXPECT_EQ(tok.encode("2024", false, false), (V{236778, 236771, 236778, 236812}));
  // Control tokens only with parse_special.
  EXPECT_EQ(tok.encode("<start_of_turn>user\nhi<end_of_turn>", false, true),
            (V{105, 2364, 107, 2202, 106}));
  const V plain = tok.encode("<start_of_turn>user", false, false);
  EXPECT_TRUE(std::find(plain.begin(), plain.end(), 105) == plain.end()) << show(plain);
  EXPECT_EQ(tok.decode(plain), "<start_of_turn>user");
  // "</s>" counts as control: split off only with parse_special; "<s>" is
  // USER_DEFINED and split off always.
  EXPECT_EQ(tok.encode("</s>x<s>y", false, true), (V{212, 236781, 203, 236762}));
  EXPECT_EQ(tok.encode("</s>x<s>y", false, false), (V{954, 236751, 236813, 236781, 203, 236762}));
}

TEST(SpmTokenizer, Pieces) {
  REQUIRE_TOKENIZER(tok);
  EXPECT_EQ(tok.token_to_piece(26352), " Hello");
  EXPECT_EQ(tok.token_to_piece(9259), "Hello");
  EXPECT_EQ(tok.token_to_piece(238 + 0x41), "A");
  EXPECT_EQ(tok.token_to_piece(238 + 0xE2), "\xE2");
  EXPECT_EQ(tok.token_to_piece(139), "   ");  // USER_DEFINED: text as is
  EXPECT_EQ(tok.token_to_piece(107), "\n");
  EXPECT_EQ(tok.token_to_piece(2), "");
  EXPECT_EQ(tok.token_to_piece(2, true), "<bos>");
  EXPECT_EQ(tok.token_to_piece(106), "");
  EXPECT_EQ(tok.token_to_piece(106, true), "<end_of_turn>");
  EXPECT_EQ(tok.token_to_piece(212), "");
  EXPECT_EQ(tok.token_to_piece(212, true), "</s>");
  EXPECT_EQ(tok.token_to_piece(203), "<s>");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{2, 105, 2364, 107}, true), "<bos><start_of_turn>user\n");
  EXPECT_THROW(tok.token_to_piece(-1), Error);
  EXPECT_THROW(tok.token_to_piece(262144), Error);
}

TEST(SpmTokenizer, InvalidUtf8NeverCrashesAndRoundTrips) {
  REQUIRE_TOKENIZER(tok);
  const std::vector<std::string> nasty = {
      "\xff", "\xc3", "\xc3(", "\xe2\x96", "abc\xe2", "\x80\x80\x80", "\xf0\x9f\x98",
      "\xf0\x9f\x98\x80", "\xed\xa0\x80", "\xc0\xaf", "x\xf8\x88\x80\x80\x80y", std::string("\0a\0", 3),
      "\xe2\x96\x81\xe2\x96", "<bos\xff>", "\n\xff\n\n \xfe  ", "\xf0 a", "\xe2\x96 \xc3 ",
  };
  for (const std::string& s : nasty) {
    for (bool ps : {false, true}) {
      std::vector<int32_t> ids;
      ASSERT_NO_THROW(ids = tok.encode(s, false, ps)) << escape(s);
      for (int32_t id : ids) ASSERT_TRUE(tok.vocab().valid(id));
      EXPECT_EQ(tok.decode(ids), as_decoded(s)) << escape(s);
    }
  }
  // A bad byte is one character: byte fallback for it, the rest as usual.
  const Vocab& v = tok.vocab();
  EXPECT_EQ(tok.encode("\xc3(", false, false), (std::vector<int32_t>{238 + 0xc3, v.find("(")}));
  EXPECT_EQ(tok.encode("\xf0 Hello", false, false), (std::vector<int32_t>{238 + 0xf0, 26352}));
  EXPECT_EQ(tok.encode("\xe2\x96", false, false), (std::vector<int32_t>{238 + 0xe2, 238 + 0x96}));
  // Random bytes, biased towards the interesting ones.
  std::mt19937 rng(1234);
  const char alphabet[] = {' ', '\n', '\t', '<', '>', '/', 's', 'a', '1', '\xe2', '\x96', '\x81',
                           '\xc3', '\xa9', '\xff', '\x80', '\xf0', '\x9f'};
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s(rng() % 40, '\0');
    for (char& c : s)
      c = rng() % 3 ? alphabet[rng() % sizeof alphabet] : char(rng() & 0xff);
    const auto ids = tok.encode(s, false, false);
    ASSERT_EQ(tok.decode(ids), as_decoded(s)) << escape(s);
  }
}

// The whole text: its token count and the round trip (the build and
// encode times: microbench/text_bench.cpp).
TEST(SpmTokenizer, WholeTextCountAndRoundTrip) {
  REQUIRE_TOKENIZER(tok);
  const std::string text = test::json::read_file(test::ref_dir() + "/ppl-text.txt");
  const auto ids = tok.encode(text, true, true);
  EXPECT_EQ(ids.size(), 7563u);  // README: 7,563 tokens with BOS
  EXPECT_EQ(tok.decode(ids), text);
}

// ---------------------------------------------------------------------------
// Synthetic vocabularies (no model needed)

Vocab tiny_vocab(Vocab::Config cfg = {}) {
  // id: 0 <unk>, 1 <s>, 2 </s>, 3.. pieces, then byte tokens.
  std::vector<std::string> toks = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "b", "c",
                                   "ab", "bc", "abc", "\xe2\x96\x81" "a", "<tag>", "<|im_end|>"};
  std::vector<float> scores = {0, 0, 0, -1, -2, -2, -2, -1.5f, -1.0f, -0.5f, -0.8f, 0, 0};
  std::vector<int32_t> types = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 4, 4};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    toks.push_back(buf);
    scores.push_back(0);
    types.push_back(TOKEN_TYPE_BYTE);
  }
  std::vector<std::string_view> views(toks.begin(), toks.end());
  return Vocab::from_arrays(views, scores, types, cfg);
}
constexpr int32_t kByte0 = 13;

TEST(SpmSynthetic, SpacePrefixMergesAndBytes) {
  SpmTokenizer tok(tiny_vocab());  // "llama" defaults: add_space_prefix, add_bos
  const Vocab& v = tok.vocab();
  EXPECT_TRUE(v.add_space_prefix);
  EXPECT_EQ(v.bos, 1);
  EXPECT_EQ(v.eos, 2);
  EXPECT_EQ(v.unk, 0);
  using V = std::vector<int32_t>;
  // " abc": ▁a (-0.8) vs bc (-1.0) vs ab (-1.5): ▁a first, then bc.
  EXPECT_EQ(tok.encode("abc", false, false), (V{10, 8}));
  EXPECT_EQ(tok.encode("abc", true, false), (V{1, 10, 8}));
  // "bc a": bc, ▁a
  EXPECT_EQ(tok.encode("bc a", false, false), (V{3, 8, 10}));
  // Unknown characters fall back to bytes.
  EXPECT_EQ(tok.encode("z", false, false), (V{3, kByte0 + 'z'}));
  EXPECT_EQ(tok.encode("\xc3\xa9", false, false), (V{3, kByte0 + 0xc3, kByte0 + 0xa9}));
  // Decoding drops the prefix space again.
  EXPECT_EQ(tok.decode(tok.encode("abc z", false, false)), "abc z");
  // <tag> is USER_DEFINED: split off even without parse_special; the
  // fragment after it gets a space prefix again.
  EXPECT_EQ(tok.encode("a<tag>a", false, false), (V{10, 11, 10}));
  // "<|im_end|>" is recognised as end of generation and made CONTROL.
  EXPECT_TRUE(v.is_eog(12));
  EXPECT_TRUE(v.is_eog(2));
  EXPECT_TRUE(v.is_control(12));
  EXPECT_EQ(v.eot, 12);
  EXPECT_EQ(tok.encode("<|im_end|>", false, true), (V{12}));
  EXPECT_NE(tok.encode("<|im_end|>", false, false), (V{12}));
}

TEST(SpmSynthetic, ConfigOverridesAndPhi3Rstrip) {
  Vocab::Config cfg;
  cfg.add_space_prefix = false;
  cfg.add_bos = false;
  cfg.add_eos = true;
  cfg.eos = 12;
  cfg.bos = 99999;  // out of range: keeps the default, as llama.cpp
  cfg.general_name = "Phi-3 mini";
  SpmTokenizer tok(tiny_vocab(cfg));
  using V = std::vector<int32_t>;
  EXPECT_EQ(tok.vocab().bos, 1);
  EXPECT_EQ(tok.vocab().eos, 12);
  EXPECT_EQ(tok.encode("abc", true, false), (V{9, 12}));
  // phi-3: special tokens swallow whitespace on their right ("<s>" excepted).
  EXPECT_TRUE(tok.vocab().has_attr(11, TOKEN_ATTR_RSTRIP));
  EXPECT_FALSE(tok.vocab().has_attr(1, TOKEN_ATTR_RSTRIP));
  EXPECT_EQ(tok.encode("a<tag>  \n c", false, false), (V{4, 11, 6}));
  EXPECT_EQ(tok.encode("a<s> c", false, true), (V{4, 1, 3, 6}));
}

TEST(SpmSynthetic, LongestSpecialFirstAsLlamaCpp) {
  // "bcd" (longer) is tried before "ab" although "ab" starts earlier.
  const std::vector<std::string_view> toks = {"<unk>", "<s>", "</s>", "ab", "bcd", "a", "b", "c", "d"};
  const std::vector<float> scores(toks.size(), 0.0f);
  const std::vector<int32_t> types = {2, 3, 3, 4, 4, 1, 1, 1, 1};
  Vocab::Config cfg;
  cfg.add_space_prefix = false;
  SpmTokenizer tok(Vocab::from_arrays(toks, scores, types, cfg));
  EXPECT_EQ(tok.encode("abcd", false, false), (std::vector<int32_t>{5, 4}));
  EXPECT_EQ(tok.encode("abab", false, false), (std::vector<int32_t>{3, 3}));
}

TEST(SpmSynthetic, EqualScoresMergeLeftmostFirst) {
  const std::vector<std::string_view> toks = {"<unk>", "<s>", "</s>", "a", "aa"};
  const std::vector<float> scores = {0, 0, 0, -1, -1};
  const std::vector<int32_t> types = {2, 3, 3, 1, 1};
  Vocab::Config cfg;
  cfg.add_space_prefix = false;
  SpmTokenizer tok(Vocab::from_arrays(toks, scores, types, cfg));
  // No byte tokens and unk is <unk>: unknown bytes become unk.
  EXPECT_EQ(tok.encode("aaa", false, false), (std::vector<int32_t>{4, 3}));
  EXPECT_EQ(tok.encode("x", false, false), (std::vector<int32_t>{0}));
}

// ---------------------------------------------------------------------------
// Vocab errors, on GGUF files built in memory

class GGUFWriter {
 public:
  GGUFWriter() {
    put_raw("GGUF", 4);
    put<uint32_t>(3);
    put<uint64_t>(0);  // tensors
    n_kv_at_ = buf_.size();
    put<uint64_t>(0);  // kvs, patched
  }
  void str(std::string_view key, std::string_view v) {
    header(key, 8);
    put_str(v);
  }
  void u32(std::string_view key, uint32_t v) {
    header(key, 4);
    put(v);
  }
  void str_array(std::string_view key, const std::vector<std::string_view>& v) {
    header(key, 9);
    put<uint32_t>(8);
    put<uint64_t>(v.size());
    for (auto s : v) put_str(s);
  }
  void f32_array(std::string_view key, const std::vector<float>& v) {
    header(key, 9);
    put<uint32_t>(6);
    put<uint64_t>(v.size());
    for (float x : v) put(x);
  }
  void i32_array(std::string_view key, const std::vector<int32_t>& v) {
    header(key, 9);
    put<uint32_t>(5);
    put<uint64_t>(v.size());
    for (int32_t x : v) put(x);
  }
  const std::vector<uint8_t>& finish() {
    std::memcpy(buf_.data() + n_kv_at_, &n_kv_, 8);
    while (buf_.size() % 32) buf_.push_back(0);
    return buf_;
  }

 private:
  template <typename T>
  void put(T v) {
    put_raw(&v, sizeof v);
  }
  void put_raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
  }
  void put_str(std::string_view s) {
    put<uint64_t>(s.size());
    put_raw(s.data(), s.size());
  }
  void header(std::string_view key, uint32_t type) {
    ++n_kv_;
    put_str(key);
    put(type);
  }
  std::vector<uint8_t> buf_;
  size_t n_kv_at_ = 0;
  uint64_t n_kv_ = 0;
};

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    const GGUFFile f = GGUFFile::parse(bytes.data(), bytes.size(), "tiny.gguf");
    auto t = Tokenizer::from_gguf(f);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(VocabErrors, MissingOrBadKeysAreNamed) {
  const std::vector<std::string_view> toks = {"<unk>", "<s>", "</s>", "a"};
  {
    GGUFWriter w;
    w.str("tokenizer.ggml.model", "llama");
    const std::string e = error_of(w.finish());
    EXPECT_NE(e.find("tokenizer.ggml.tokens"), std::string::npos) << e;
    EXPECT_NE(e.find("tiny.gguf"), std::string::npos) << e;
  }
  {
    GGUFWriter w;
    w.str_array("tokenizer.ggml.tokens", toks);
    const std::string e = error_of(w.finish());
    EXPECT_NE(e.find("tokenizer.ggml.model"), std::string::npos) << e;
  }
  {
    GGUFWriter w;
    w.str("tokenizer.ggml.model", "llama");
    w.i32_array("tokenizer.ggml.tokens", {1, 2, 3});
    const std::string e = error_of(w.finish());
    EXPECT_NE(e.find("tokenizer.ggml.tokens"), std::string::npos) << e;
  }
  {
    GGUFWriter w;
    w.str("tokenizer.ggml.model", "llama");
    w.str_array("tokenizer.ggml.tokens", toks);
    w.f32_array("tokenizer.ggml.scores", {0, 0});
    const std::string e = error_of(w.finish());
    EXPECT_NE(e.find("tokenizer.ggml.scores"), std::string::npos) << e;
  }
  {
    GGUFWriter w;
    w.str("tokenizer.ggml.model", "llama");
    w.str_array("tokenizer.ggml.tokens", toks);
    w.str("tokenizer.ggml.token_type", "oops");
    const std::string e = error_of(w.finish());
    EXPECT_NE(e.find("tokenizer.ggml.token_type"), std::string::npos) << e;
  }
  {
    GGUFWriter w;
    w.str("tokenizer.ggml.model", "llama");
    w.str_array("tokenizer.ggml.tokens", toks);
    w.str("tokenizer.ggml.bos_token_id", "one");
    const std::string e = error_of(w.finish());
    EXPECT_NE(e.find("tokenizer.ggml.bos_token_id"), std::string::npos) << e;
  }
  {
    GGUFWriter w;
    w.str("tokenizer.ggml.model", "unigram-ish");
    w.str_array("tokenizer.ggml.tokens", toks);
    const std::string e = error_of(w.finish());
    EXPECT_NE(e.find("tokenizer.ggml.model"), std::string::npos) << e;
    EXPECT_NE(e.find("unigram-ish"), std::string::npos) << e;
  }
}

TEST(VocabErrors, BpeKeysAreNamed) {
  const std::vector<std::string_view> toks = {"a", "b", "ab", "\xc4\xa0"};
  {
    GGUFWriter w;  // no merges
    w.str("tokenizer.ggml.model", "gpt2");
    w.str("tokenizer.ggml.pre", "qwen2");
    w.str_array("tokenizer.ggml.tokens", toks);
    const std::string e = error_of(w.finish());
    EXPECT_NE(e.find("tokenizer.ggml.merges"), std::string::npos) << e;
    EXPECT_NE(e.find("tiny.gguf"), std::string::npos) << e;
  }
  {
    GGUFWriter w;  // a pre-tokenizer llama.cpp does not know either
    w.str("tokenizer.ggml.model", "gpt2");
    w.str("tokenizer.ggml.pre", "made-up-pre");
    w.str_array("tokenizer.ggml.tokens", toks);
    w.str_array("tokenizer.ggml.merges", {"a b"});
    const std::string e = error_of(w.finish());
    EXPECT_NE(e.find("tokenizer.ggml.pre"), std::string::npos) << e;
    EXPECT_NE(e.find("made-up-pre"), std::string::npos) << e;
    EXPECT_NE(e.find("tiny.gguf"), std::string::npos) << e;
  }
  {
    GGUFWriter w;
    w.str("tokenizer.ggml.model", "gpt2");
    w.str("tokenizer.ggml.pre", "qwen2");
    w.str_array("tokenizer.ggml.tokens", toks);
    w.str_array("tokenizer.ggml.merges", {"a b"});
    const auto& bytes = w.finish();
    const GGUFFile f = GGUFFile::parse(bytes.data(), bytes.size(), "tiny.gguf");
    auto tok = Tokenizer::from_gguf(f);
    EXPECT_EQ(tok->encode("ab a", false, false), (std::vector<int32_t>{2, 3, 0}));
    EXPECT_EQ(tok->decode(std::vector<int32_t>{2, 3, 0}), "ab a");
  }
}

TEST(VocabErrors, MinimalFileLoads) {
  const std::vector<std::string_view> toks = {"<unk>", "<s>", "</s>", "\xe2\x96\x81" "a", "a", ""};
  GGUFWriter w;
  w.str("tokenizer.ggml.model", "llama");
  w.str_array("tokenizer.ggml.tokens", toks);
  w.u32("tokenizer.ggml.bos_token_id", 1);
  const auto& bytes = w.finish();
  const GGUFFile f = GGUFFile::parse(bytes.data(), bytes.size(), "tiny.gguf");
  const Vocab v = Vocab::from_gguf(f);
  EXPECT_EQ(v.n_tokens(), 6);
  EXPECT_EQ(v.text(5), "[EMPTY_5]");  // as llama.cpp names empty tokens
  EXPECT_EQ(v.scores[3], 0.0f);
  EXPECT_EQ(v.types[3], TOKEN_TYPE_NORMAL);
  EXPECT_TRUE(v.add_space_prefix);
  auto tok = Tokenizer::from_gguf(f);
  EXPECT_EQ(tok->encode("a", true, false), (std::vector<int32_t>{1, 3}));
}

}  // namespace
}  // namespace weir
