// llama.cpp's own tokenizer tests, run on its vocab-only GGUFs in
// $WEIR_REF_DIR/vocab/ggml-vocab-NAME.gguf (a file that is absent skips):
// - test-tokenizer-0: every case of NAME.gguf.inp tokenized as that test
//   does (no BOS, special tokens not parsed) gives the ids of the same line
//   of NAME.gguf.out, which llama.cpp made;
// - test-tokenizer-1-bpe / -spm: every token's text tokenizes to tokens that
//   decode to that text again, and so does every code point.
// Vocabularies without .inp/.out (gpt-neox, baichuan) are loaded and held to
// the round trips only.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/gguf.h"
#include "test_env.h"
#include "text/bpe_tokenizer.h"
#include "text/byte_unicode.h"
#include "text/tokenizer.h"
#include "text/vocab.h"

namespace weir {
namespace {

using Ids = std::vector<int32_t>;

std::string vocab_path(const std::string& name) {
  return test::ref_dir() + "/vocab/ggml-vocab-" + name + ".gguf";
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
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

std::string show(const Ids& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

struct Case {
  std::string text;
  Ids ids;
};

// test-tokenizer-0's reading: the inputs are separated by
// "\n__ggml_vocab_test__\n"; each line of the .out file is one case's ids.
std::vector<Case> read_cases(const std::string& gguf) {
  const std::string inp = read_bytes(gguf + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(inp.substr(pos));
      break;
    }
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::ifstream out(gguf + ".out");
  std::vector<Case> cases;
  size_t i = 0;
  for (std::string line; std::getline(out, line); ++i) {
    EXPECT_LT(i, texts.size()) << gguf << ".out has more lines than .inp has cases";
    if (i >= texts.size()) break;
    Case c{texts[i], {}};
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  EXPECT_EQ(cases.size(), texts.size()) << gguf;
  return cases;
}

struct Loaded {
  std::unique_ptr<GGUFFile> file;
  std::unique_ptr<Tokenizer> tok;
};

// Each file loaded once for all the tests of this process.
const Loaded& load(const std::string& name) {
  static std::map<std::string, Loaded> loaded;
  auto [it, fresh] = loaded.try_emplace(name);
  if (fresh && std::filesystem::exists(vocab_path(name))) {
    it->second.file = std::make_unique<GGUFFile>(GGUFFile::open(vocab_path(name)));
    it->second.tok = Tokenizer::from_gguf(*it->second.file);
  }
  return it->second;
}

#define REQUIRE_VOCAB(tok, name)                                                             \
  if (!std::filesystem::exists(vocab_path(name)))                                            \
    GTEST_SKIP() << "reference vocabulary not found: " << vocab_path(name);                  \
  const Tokenizer& tok = *load(name).tok;

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(char(cp));
  } else if (cp < 0x800) {
    s += char(0xC0 | cp >> 6);
    s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | cp >> 12);
    s += char(0x80 | (cp >> 6 & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | cp >> 18);
    s += char(0x80 | (cp >> 12 & 0x3F));
    s += char(0x80 | (cp >> 6 & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

class VocabReference : public testing::TestWithParam<const char*> {};

// The vocab files of llama.cpp's models/ folder that weir tokenizes (BPE and
// SentencePiece); bert-bge (WPM) has its own test.
const char* const kVocabs[] = {
    "gpt-2",  "llama-spm",      "llama-bpe",    "phi-3",     "qwen2",    "command-r",
    "falcon", "mpt",            "starcoder",    "refact",    "gpt-neox", "baichuan",
    "deepseek-coder", "deepseek-llm",
};

TEST_P(VocabReference, TokenizesEveryCaseAsLlamaCppTestTokenizer0) {
  const std::string name = GetParam();
  const std::string gguf = vocab_path(name);
  if (!std::filesystem::exists(gguf + ".inp") || !std::filesystem::exists(gguf + ".out"))
    GTEST_SKIP() << "no test vectors: " << gguf << ".inp/.out";
  REQUIRE_VOCAB(tok, name);
  const std::vector<Case> cases = read_cases(gguf);
  ASSERT_FALSE(cases.empty());
  size_t passed = 0;
  for (const Case& c : cases) {
    const Ids got = tok.encode(c.text, /*add_special=*/false, /*parse_special=*/false);
    if (got == c.ids) {
      ++passed;
      continue;
    }
    ADD_FAILURE() << name << ": \"" << escape(c.text) << "\"\n  want " << show(c.ids)
                  << "\n  got  " << show(got);
  }
  std::printf("[ %s ] %zu/%zu cases as llama.cpp\n", name.c_str(), passed, cases.size());
  RecordProperty("cases_passed", std::to_string(passed) + "/" + std::to_string(cases.size()));
  EXPECT_EQ(passed, cases.size()) << name;
}

// test-tokenizer-1-bpe and -spm: a token's text (special tokens rendered),
// tokenized with special tokens parsed, decodes to that text again.
TEST_P(VocabReference, EveryTokenRoundTripsAsLlamaCppTestTokenizer1) {
  const std::string name = GetParam();
  REQUIRE_VOCAB(tok, name);
  int failures = 0;
  for (int32_t id = 0; id < tok.vocab().n_tokens() && failures < 10; ++id) {
    const int32_t one[] = {id};
    const std::string text = tok.decode(one, /*render_special=*/true);
    const Ids again = tok.encode(text, false, /*parse_special=*/true);
    const std::string check = tok.decode(again, true);
    if (check != text) {
      ++failures;
      ADD_FAILURE() << name << ": token " << id << " decodes to \"" << escape(text)
                    << "\", which tokenizes to " << show(again) << " decoding to \""
                    << escape(check) << "\"";
    }
  }
  EXPECT_EQ(failures, 0);
}

// ... and every code point (but surrogates, U+40000..U+E0000 and U+2581,
// as llama.cpp's test) tokenizes to tokens that decode to it. A byte-level
// vocabulary may lack a byte's character (falcon has no token for bytes
// 0x03, 0x04, 0x0B ...): llama.cpp drops such a byte, and so does weir.
TEST_P(VocabReference, EveryCodePointRoundTripsAsLlamaCppTestTokenizer1) {
  const std::string name = GetParam();
  REQUIRE_VOCAB(tok, name);
  bool byte_lacks_token[256] = {};
  if (tok.vocab().model == "gpt2")
    for (int b = 0; b < 256; ++b)
      byte_lacks_token[b] = tok.vocab().find(byte_to_unicode(uint8_t(b))) == TOKEN_NULL;
  int failures = 0;
  for (uint32_t cp = 0; cp < 0x110000 && failures < 10; ++cp) {
    if ((cp >= 0xD800 && cp <= 0xDFFF) || (cp >= 0x40000 && cp <= 0xE0000) || cp == 0x2581)
      continue;
    const std::string s = utf8(cp);
    std::string want;
    for (char c : s)
      if (!byte_lacks_token[uint8_t(c)]) want.push_back(c);
    const Ids ids = tok.encode(s, false, false);
    const std::string check = tok.decode(ids, true);
    if (check != want) {
      ++failures;
      char hex[16];
      std::snprintf(hex, sizeof hex, "U+%04X", cp);
      ADD_FAILURE() << name << ": " << hex << " tokenizes to " << show(ids) << ", decoding to \""
                    << escape(check) << "\"";
    }
  }
  EXPECT_EQ(failures, 0);
}

INSTANTIATE_TEST_SUITE_P(LlamaCppVocabs, VocabReference, testing::ValuesIn(kVocabs),
                         [](const testing::TestParamInfo<const char*>& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

// What the files are, so a change in them (or in how weir reads them) shows.
TEST(VocabReferenceFiles, ModelsAndPreTokenizers) {
  struct Expect {
    const char* name;
    const char* model;
    const char* pre;
  };
  const Expect expected[] = {
      {"falcon", "gpt2", "falcon"},       {"mpt", "gpt2", "mpt"},
      {"starcoder", "gpt2", "starcoder"}, {"refact", "gpt2", "refact"},
      {"deepseek-coder", "gpt2", "deepseek-coder"},
      {"deepseek-llm", "gpt2", "deepseek-llm"},
      {"gpt-neox", "gpt2", ""},  // no tokenizer.ggml.pre: llama.cpp's "default"
      {"baichuan", "llama", ""},  // SentencePiece
  };
  int found = 0;
  for (const Expect& e : expected) {
    if (!std::filesystem::exists(vocab_path(e.name))) continue;
    ++found;
    const Tokenizer& tok = *load(e.name).tok;
    EXPECT_EQ(tok.vocab().model, e.model) << e.name;
    EXPECT_EQ(tok.vocab().pre, e.pre) << e.name;
    if (const auto* bpe = dynamic_cast<const BpeTokenizer*>(&tok)) {
      EXPECT_EQ(bpe->pretokenizer().kind(), PreTokenizer::kind_for(e.pre)) << e.name;
    }
    // A sentence tokenizes to ids of the vocabulary and decodes back.
    const std::string text = "Hello world, 1234 \xe4\xbd\xa0\xe5\xa5\xbd!";
    const Ids ids = tok.encode(text, false, false);
    ASSERT_FALSE(ids.empty()) << e.name;
    for (int32_t id : ids) EXPECT_TRUE(tok.vocab().valid(id)) << e.name;
    EXPECT_EQ(tok.decode(ids), text) << e.name;
  }
  if (found == 0) GTEST_SKIP() << "no reference vocabularies under " << test::ref_dir() << "/vocab";
}

// llama.cpp turns the clean-up of decoded spaces off for the DeepSeek
// pre-tokenizers and keeps it for the others here.
TEST(VocabReferenceFiles, CleanUpOfSpacesAsLlamaCpp) {
  const std::pair<const char*, bool> expected[] = {
      {"falcon", true},          {"mpt", true},           {"starcoder", true},
      {"refact", true},          {"gpt-neox", true},      {"deepseek-coder", false},
      {"deepseek-llm", false},
  };
  for (const auto& [name, clean] : expected) {
    if (!std::filesystem::exists(vocab_path(name))) continue;
    EXPECT_EQ(load(name).tok->vocab().clean_spaces, clean) << name;
  }
}

}  // namespace
}  // namespace weir
