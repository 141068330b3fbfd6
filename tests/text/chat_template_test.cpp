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
  EXPECT_EQ(builtin_chat_template("gemma"), read_file(test::data_dir() + "/gemma3-builtin-chat-template.jinja"));
  EXPECT_TRUE(builtin_chat_template("nothing").empty());
}

// Without tools the built-in Gemma template is Google's: the same text for
// every conversation Google's renders, the same refusals.
TEST(ChatTemplate, BuiltInGemmaWithoutToolsIsGoogles) {
  const jinja::Template google(read_file(test::data_dir() + "/gemma3-chat-template.jinja"));
  const jinja::Template builtin(builtin_chat_template("gemma"));
  const char* conversations[] = {
      kConversation,
      R"([{"role": "user", "content": "Hi"}])",
      R"([{"role": "system", "content": [{"type": "text", "text": "S"}]}, {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " D "}]}])",
      R"([{"role": "user", "content": "a"}, {"role": "critic", "content": "b"}])",
      R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])",
      R"([{"role": "assistant", "content": "a"}])",
      R"([{"role": "user", "content": null}])",
      R"([{"role": "system", "content": "only"}])",
  };
  for (const char* m : conversations) {
    for (bool gen : {false, true}) {
      const jinja::Value ctx = jinja::value_from_json(std::string(R"({"bos_token": "<bos>", "add_generation_prompt": )") +
                                                      (gen ? "true" : "false") + R"(, "messages": )" + m + "}");
      std::string want, got, want_error, got_error;
      try {
        want = google.render(ctx);
      } catch (const Error& e) {
        want_error = e.what();
      }
      try {
        got = builtin.render(ctx);
      } catch (const Error& e) {
        got_error = e.what();
      }
      EXPECT_EQ(got, want) << m;
      EXPECT_EQ(got_error.empty(), want_error.empty()) << m << "\n" << got_error << "\n" << want_error;
    }
  }
}

// A tool-calling conversation on the built-in Gemma template: the tools in
// the first user turn, the call in the model's turn (content null), the
// results of two calls in one user turn. The expected text is written out.
TEST(ChatTemplate, BuiltInGemmaRendersToolTurns) {
  const jinja::Template t(builtin_chat_template("gemma"));
  const std::string got = t.render(jinja::value_from_json(R"({"bos_token": "<bos>", "add_generation_prompt": true,
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
      "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"},
        {"role": "assistant", "content": null, "tool_calls": [
          {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}},
          {"id": "2", "type": "function", "function": {"name": "f", "arguments": {"x": 2}}}]},
        {"role": "tool", "tool_call_id": "1", "content": " one "}, {"role": "tool", "tool_call_id": "2", "content": "two"}]})"));
  EXPECT_EQ(got,
            "<bos><start_of_turn>user\nS\n\nYou may call one or more functions to answer. Their signatures, within "
            "<tools></tools> tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
            "{\"type\": \"object\"}}}\n</tools>\n\nFor each call, answer with a JSON object of the function's name and "
            "arguments within <tool_call></tool_call> tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
            "<args-json-object>}\n</tool_call>\n\nQ<end_of_turn>\n"
            "<start_of_turn>model\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 2}}\n</tool_call><end_of_turn>\n"
            "<start_of_turn>user\n<tool_response>\none\n</tool_response>\n<tool_response>\ntwo\n</tool_response>"
            "<end_of_turn>\n<start_of_turn>model\n");
}

TEST(ChatTemplate, FileTemplateComesFirst) {
  GGUFFile f = GGUFFile::open(test::ref_dir() + "/qwen2-vocab-deepseek-r1.gguf");
  const Vocab v = Vocab::from_gguf(f);
  const ChatTemplate t = ChatTemplate::for_model(f, v);
  EXPECT_EQ(t.origin(), "tokenizer.chat_template");
  const std::string got = t.render(jinja::value_from_json(R"([{"role": "user", "content": "Hi"}])"), true);
  EXPECT_EQ(got, std::string(v.text(v.bos)) + "<\xEF\xBD\x9C" "User\xEF\xBD\x9C>Hi<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>");
}

// Further variables (Hugging Face's template kwargs) reach the template:
// gpt-oss's reads reasoning_effort (weir serve passes the request's), and
// says "medium" without it.
TEST(ChatTemplate, VariablesReachTheTemplate) {
  GGUFFile f = GGUFFile::open(test::ref_dir() + "/qwen2-vocab-deepseek-r1.gguf");
  const Vocab v = Vocab::from_gguf(f);
  const ChatTemplate t(read_file(test::data_dir() + "/gpt-oss-chat-template.jinja"), "gpt-oss", v);
  const jinja::Value messages = jinja::value_from_json(R"([{"role": "user", "content": "Hi"}])");
  const std::string high = t.render(messages, true, jinja::Value(), {}, jinja::value_from_json(R"({"reasoning_effort": "high"})"));
  EXPECT_NE(high.find("\nReasoning: high\n"), std::string::npos) << high;
  EXPECT_NE(t.render(messages, true).find("\nReasoning: medium\n"), std::string::npos);
  EXPECT_TRUE(high.ends_with("<|start|>user<|message|>Hi<|end|><|start|>assistant")) << high;
}

}  // namespace
}  // namespace weir
