// A streamed answer with tools: the text streamed and the content and calls
// at the end add up to what the whole answer gives, whatever the pieces the
// text comes in; text before a call streams, the call is held.
#include "engine/openai/tool_call_stream.h"

#include <gtest/gtest.h>

namespace weir::openai {
namespace {

using nlohmann::json;

struct Streamed {
  std::string streamed;  // what went out as it came
  ParsedAnswer end;
};

Streamed stream(const std::string& text, size_t piece, ToolSyntax s, const json& forced = nullptr) {
  ToolCallStream t(s, forced);
  Streamed out;
  for (size_t i = 0; i < text.size(); i += piece) out.streamed += t.push(std::string_view(text).substr(i, piece));
  out.end = t.finish();
  return out;
}

void expect_same_as_whole(const std::string& text, ToolSyntax s, const json& forced = nullptr) {
  const ParsedAnswer whole = parse_answer(text, s, forced);
  for (size_t piece : {1, 2, 3, 7, 1000}) {
    const Streamed got = stream(text, piece, s, forced);
    EXPECT_EQ(got.streamed + got.end.content, whole.content) << text << " in pieces of " << piece;
    ASSERT_EQ(got.end.calls.size(), whole.calls.size()) << text;
    for (size_t i = 0; i < whole.calls.size(); ++i) {
      EXPECT_EQ(got.end.calls[i].name, whole.calls[i].name);
      EXPECT_EQ(got.end.calls[i].arguments, whole.calls[i].arguments);
    }
  }
}

TEST(ToolCallStream, AddsUpToTheWholeAnswer) {
  const std::pair<const char*, ToolSyntax> cases[] = {
      {"Let me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"<tool_call>\"}}\n</tool_call>", ToolSyntax::Hermes},
      {"Plain text with a < and <tool and <tool_call", ToolSyntax::Hermes},
      {"  \n{\"name\": \"f\", \"parameters\": {}}", ToolSyntax::Llama3},
      {"Hmm.<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": [1]}}", ToolSyntax::Llama3},
      {"[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}]", ToolSyntax::Mistral},
      {"Text [with brackets] and [TOOL_CALLS] broken", ToolSyntax::Mistral},
      {"```json\n{\"name\": \"f\", \"arguments\": {}}\n```", ToolSyntax::Json},
      {"{\"not\": \"a call\"}", ToolSyntax::Json},
      {"Just an answer.", ToolSyntax::Json},
  };
  for (const auto& [text, syntax] : cases) expect_same_as_whole(text, syntax);
  expect_same_as_whole("{\"city\": \"Paris\"}", ToolSyntax::Hermes,
                       json::parse(R"({"type": "function", "function": {"name": "get_weather"}})"));
  expect_same_as_whole("[{\"name\": \"a\", \"parameters\": {}}]", ToolSyntax::Hermes, "required");
}

TEST(ToolCallStream, TextStreamsUntilACallMayBegin) {
  ToolCallStream t(ToolSyntax::Hermes);
  EXPECT_EQ(t.push("Let me "), "Let me ");
  EXPECT_EQ(t.push("check.<tool"), "check.");  // "<tool" may begin the marker
  EXPECT_EQ(t.push("_call>{\"name\": \"f\"}"), "");
  EXPECT_EQ(t.push("</tool_call>"), "");
  const ParsedAnswer end = t.finish();
  EXPECT_EQ(end.content, "");
  ASSERT_EQ(end.calls.size(), 1u);
  EXPECT_EQ(end.calls[0].name, "f");

  ToolCallStream plain(ToolSyntax::Hermes);
  EXPECT_EQ(plain.push("  "), "");  // white space waits for the first visible character
  EXPECT_EQ(plain.push("Hi <b>"), "  Hi <b>");
  EXPECT_EQ(plain.finish().content, "");

  ToolCallStream json_first(ToolSyntax::Hermes);
  EXPECT_EQ(json_first.push("{\"a\""), "");  // may be a call as a whole: held
  EXPECT_EQ(json_first.push(": 1} is JSON"), "");
  EXPECT_EQ(json_first.finish().content, "{\"a\": 1} is JSON");
}

}  // namespace
}  // namespace weir::openai
