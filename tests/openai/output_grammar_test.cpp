// Constrained output (engine/grammar through openai/output_grammar.h): random
// walks through the tokens a grammar allows, on a synth model's vocabulary
// (byte tokens, single characters and words), must give what the grammar
// says: UTF-8 (checked here byte by byte), JSON that nlohmann parses, and the
// schema's bounds (string lengths in characters, integer ranges, array
// sizes, required properties, no others). The walks pick uniformly among the
// allowed tokens, so rare paths (bytes of multi-byte characters, escapes)
// come up often.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <random>
#include <regex>
#include <string>
#include <vector>

#include "core/gguf.h"
#include "engine/grammar/grammar.h"
#include "engine/openai/output_grammar.h"
#include "text/tokenizer.h"
#include "tiny_synth.h"

namespace weir::openai {
namespace {

using nlohmann::json;

// Whether s is UTF-8: no stray continuation bytes, no overlong forms, no
// surrogates, nothing past U+10FFFF.
bool is_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (n < 0 || i + size_t(n) >= s.size() + (n == 0 ? 1 : 0)) return false;
    uint32_t cp = n == 0 ? c : n == 1 ? c & 0x1F : n == 2 ? c & 0x0F : c & 0x07;
    for (int k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + size_t(k)]);
      if ((d >> 6) != 2) return false;
      cp = cp << 6 | (d & 0x3F);
    }
    const uint32_t least[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += size_t(n) + 1;
  }
  return true;
}

size_t characters(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) >> 6) != 2;
  return n;
}

struct Walk {
  std::string text;
  bool ended = false;  // an end-of-generation token was drawn
};

Walk random_walk(const Tokenizer& tok, GrammarState& g, int64_t n_vocab, std::mt19937& rng, int max_tokens) {
  std::vector<uint32_t> mask(size_t(allow_words(n_vocab)));
  Walk w;
  for (int step = 0; step < max_tokens; ++step) {
    g.fill_allowed(mask.data());
    std::vector<int32_t> ok;
    for (int32_t t = 0; t < n_vocab; ++t)
      if ((mask[size_t(t) / 32] >> (t % 32)) & 1u) ok.push_back(t);
    if (ok.empty()) ADD_FAILURE() << "nothing allowed after " << w.text;
    if (ok.empty()) return w;
    const int32_t t = ok[std::uniform_int_distribution<size_t>(0, ok.size() - 1)(rng)];
    EXPECT_TRUE(g.accept(t));
    if (tok.vocab().is_eog(t)) {
      w.ended = true;
      EXPECT_TRUE(g.terminated());
      return w;
    }
    w.text += tok.token_to_piece(t, false);
  }
  return w;
}

class OutputGrammar : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    file_ = new GGUFFile(GGUFFile::open(test::synth_tiny("llama", "grammar")));
    tok_ = Tokenizer::from_gguf(*file_).release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete file_;
  }
  static GGUFFile* file_;
  static Tokenizer* tok_;
};
GGUFFile* OutputGrammar::file_ = nullptr;
Tokenizer* OutputGrammar::tok_ = nullptr;

TEST_F(OutputGrammar, RandomWalksMatchTheSchema) {
  const json schema = json::parse(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "minLength": 1, "maxLength": 6},
      "free": {"type": "string"},
      "age": {"type": "integer", "minimum": -5, "maximum": 120},
      "ok": {"type": "boolean"},
      "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2},
      "kind": {"enum": ["a b", "x\"y", "z"]}
    },
    "required": ["name", "age", "kind"],
    "additionalProperties": false})");
  const int64_t n_vocab = tok_->vocab().n_tokens();
  GrammarCompiler compiler(*tok_, n_vocab);
  const auto g = output_grammar(&compiler, OutputFormat{OutputFormat::Kind::JsonSchema, schema.dump(), ""});
  ASSERT_TRUE(g);
  std::mt19937 rng(46);
  int ended = 0;
  for (int walk = 0; walk < 200; ++walk) {
    GrammarState state(g);
    const Walk w = random_walk(*tok_, state, n_vocab, rng, 400);
    if (!w.ended) continue;  // (a free string that went on: cut by the token limit)
    ++ended;
    SCOPED_TRACE(w.text);
    ASSERT_TRUE(is_utf8(w.text));
    const json v = json::parse(w.text, nullptr, false);
    ASSERT_FALSE(v.is_discarded());
    ASSERT_TRUE(v.is_object());
    for (const char* k : {"name", "age", "kind"}) EXPECT_TRUE(v.contains(k)) << k;
    for (const auto& [k, x] : v.items()) EXPECT_TRUE(schema["properties"].contains(k)) << k;
    const std::string name = v["name"].get<std::string>();
    EXPECT_GE(characters(name), 1u);
    EXPECT_LE(characters(name), 6u);
    EXPECT_GE(v["age"].get<int64_t>(), -5);
    EXPECT_LE(v["age"].get<int64_t>(), 120);
    if (v.contains("tags")) {
      EXPECT_LE(v["tags"].size(), 2u);
      for (const json& t : v["tags"]) EXPECT_LE(characters(t.get<std::string>()), 3u);
    }
    EXPECT_TRUE(v["kind"] == "a b" || v["kind"] == "x\"y" || v["kind"] == "z") << v["kind"];
  }
  EXPECT_GE(ended, 100);
}

// A GBNF grammar, any JSON object, and what does not compile (400 naming
// the field that asked).
TEST_F(OutputGrammar, GbnfObjectAndErrors) {
  const int64_t n_vocab = tok_->vocab().n_tokens();
  GrammarCompiler compiler(*tok_, n_vocab);
  std::mt19937 rng(7);
  const auto yes_no = output_grammar(&compiler, {OutputFormat::Kind::Grammar, R"(root ::= ("yes" | "no") [0-9]{1,2})", "grammar"});
  for (int i = 0; i < 50; ++i) {
    GrammarState s(yes_no);
    const Walk w = random_walk(*tok_, s, n_vocab, rng, 20);
    ASSERT_TRUE(w.ended);
    const std::string word = w.text.substr(0, w.text.find_first_of("0123456789"));
    EXPECT_TRUE(word == "yes" || word == "no") << w.text;
    const std::string digits = w.text.substr(word.size());
    EXPECT_TRUE(digits.size() >= 1 && digits.size() <= 2) << w.text;
  }
  const auto object = output_grammar(&compiler, {OutputFormat::Kind::JsonObject, "", "response_format"});
  int objects = 0;
  for (int i = 0; i < 50; ++i) {
    GrammarState s(object);
    const Walk w = random_walk(*tok_, s, n_vocab, rng, 200);
    if (!w.ended) continue;
    ++objects;
    ASSERT_TRUE(is_utf8(w.text)) << w.text;
    // JSON's numbers have no bound; nlohmann refuses those past a double
    // (9E503), so exponents are cut to one digit first (digits stay digits).
    const std::string text = std::regex_replace(w.text, std::regex("([eE][-+]?[0-9])[0-9]+"), "$1");
    const json v = json::parse(text, nullptr, false);
    EXPECT_TRUE(v.is_object()) << w.text;
  }
  EXPECT_GE(objects, 10);
  EXPECT_EQ(output_grammar(&compiler, {}), nullptr);
  for (const auto& [f, field] : std::vector<std::pair<OutputFormat, std::string>>{
           {{OutputFormat::Kind::Grammar, "root ::= ", "grammar"}, "grammar"},
           {{OutputFormat::Kind::JsonSchema, R"({"type": "object", "properties": 5})", ""}, "response_format"},
           {{OutputFormat::Kind::JsonSchema, "{nope", "json_schema"}, "json_schema"}}) {
    try {
      output_grammar(&compiler, f);
      ADD_FAILURE() << f.text << " compiled";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.param, field) << e.what();
    }
  }
}

}  // namespace
}  // namespace weir::openai
