// The chat template a model gets: the real Gemma 3 270M file has none, so
// the built-in Gemma one is chosen and renders the turns Gemma is trained
// on (checked against the literal text and against Python's jinja2); the
// Qwen2 reference vocabulary brings its own. The built-in Gemma text is the
// one the Jinja tests render (tests/data), byte for byte.
#include "text/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/gguf.h"
#include "jinja_reference.h"
#include "test_env.h"

namespace weir {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const char* kConversation = R"([{"role": "system", "content": "Answer in one word."},
  {"role": "user", "content": "  Capital of France?  "}, {"role": "assistant", "content": "Paris"},
  {"role": "user", "content": "And of Italy?"}])";

TEST(ChatTemplate, RealGemmaGetsTheBuiltInOne) {
  WEIR_REQUIRE_MODEL(path);
  GGUFFile f = GGUFFile::open(path);
  const Vocab v = Vocab::from_gguf(f);
  const ChatTemplate t = ChatTemplate::for_model(f, v);
  EXPECT_EQ(t.origin(), "built-in gemma");
  const std::string got = t.render(jinja::value_from_json(kConversation), true);
  EXPECT_EQ(got,
            "<bos><start_of_turn>user\nAnswer in one word.\n\nCapital of France?<end_of_turn>\n"
            "<start_of_turn>model\nParis<end_of_turn>\n<start_of_turn>user\nAnd of Italy?<end_of_turn>\n"
            "<start_of_turn>model\n");
  // Python's jinja2 renders the same text from the same template.
  const test::JinjaCase c{"gemma", t.source(),
                          std::string(R"({"bos_token": "<bos>", "eos_token": "<eos>", "add_generation_prompt": true, "messages": )") +
                              kConversation + "}"};
  const auto want = test::render_with_jinja2({c});
  ASSERT_TRUE(want.at("gemma").ok) << want.at("gemma").error;
  EXPECT_EQ(got, want.at("gemma").output);
  // Roles out of turn: the template's own refusal.
  EXPECT_THROW(t.render(jinja::value_from_json(R"([{"role": "assistant", "content": "x"}])"), true), Error);
}

TEST(ChatTemplate, BuiltInGemmaIsTheTestedText) {
  EXPECT_EQ(builtin_chat_template("gemma"), read_file(test::data_dir() + "/gemma3-chat-template.jinja"));
  EXPECT_TRUE(builtin_chat_template("nothing").empty());
}

TEST(ChatTemplate, FileTemplateComesFirst) {
  GGUFFile f = GGUFFile::open(test::ref_dir() + "/qwen2-vocab-deepseek-r1.gguf");
  const Vocab v = Vocab::from_gguf(f);
  const ChatTemplate t = ChatTemplate::for_model(f, v);
  EXPECT_EQ(t.origin(), "tokenizer.chat_template");
  const std::string got = t.render(jinja::value_from_json(R"([{"role": "user", "content": "Hi"}])"), true);
  EXPECT_EQ(got, std::string(v.text(v.bos)) + "<\xEF\xBD\x9C" "User\xEF\xBD\x9C>Hi<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>");
}

}  // namespace
}  // namespace weir
