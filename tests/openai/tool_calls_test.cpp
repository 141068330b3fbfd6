// Tool calls read back from model answers written here by hand, in each
// family's syntax: several calls, arguments with nested JSON and strings
// holding braces and quotes, text before the calls, and broken calls, which
// stay in the content as written. The family comes from the templates'
// text (tests/data: the tool-calling templates the models publish).
#include "engine/openai/tool_calls.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "test_env.h"

namespace weir::openai {
namespace {

using nlohmann::json;

// The call's name and its arguments as a JSON value (the text's spacing is free).
void expect_call(const ToolCall& c, const std::string& name, const char* arguments) {
  EXPECT_EQ(c.name, name);
  EXPECT_EQ(json::parse(c.arguments), json::parse(arguments)) << c.arguments;
  EXPECT_EQ(c.id.size(), 29u) << c.id;
  EXPECT_EQ(c.id.rfind("call_", 0), 0u) << c.id;
}

std::string read_data(const std::string& file) {
  std::ifstream in(test::data_dir() + "/" + file, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ToolSyntax, FromTheTemplates) {
  EXPECT_EQ(tool_syntax_of(read_data("qwen2.5-chat-template.jinja")), ToolSyntax::Hermes);
  EXPECT_EQ(tool_syntax_of(read_data("chatml-tools-chat-template.jinja")), ToolSyntax::Hermes);  // Qwen 3
  EXPECT_EQ(tool_syntax_of(read_data("hermes-tools-chat-template.jinja")), ToolSyntax::Hermes);
  EXPECT_EQ(tool_syntax_of(read_data("gemma3-builtin-chat-template.jinja")), ToolSyntax::Hermes);
  EXPECT_EQ(tool_syntax_of(read_data("llama3.1-chat-template.jinja")), ToolSyntax::Llama3);
  EXPECT_EQ(tool_syntax_of(read_data("llama3.2-chat-template.jinja")), ToolSyntax::Llama3);
  EXPECT_EQ(tool_syntax_of(read_data("mistral-v0.3-chat-template.jinja")), ToolSyntax::Mistral);
  EXPECT_EQ(tool_syntax_of(read_data("gemma3-chat-template.jinja")), ToolSyntax::Json);  // Google's: no tools
}

TEST(HermesToolCalls, SeveralCallsWithTextBefore) {
  const ParsedAnswer p = parse_tool_calls(
      "Let me look both up.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"unit\": \"celsius\"}}\n</tool_call>",
      ToolSyntax::Hermes);
  ASSERT_EQ(p.calls.size(), 2u);
  expect_call(p.calls[0], "get_weather", R"({"city": "Paris"})");
  expect_call(p.calls[1], "get_weather", R"({"city": "Rome", "unit": "celsius"})");
  EXPECT_EQ(p.content, "Let me look both up.\n\n");
  EXPECT_NE(p.calls[0].id, p.calls[1].id);
}

TEST(HermesToolCalls, NestedArgumentsAndBracesInStrings) {
  const ParsedAnswer p = parse_tool_calls(
      R"(<tool_call>
{"name": "run", "arguments": {"code": "if (a) { b(\"}\"); } // ]]", "opts": {"deep": [1, {"x": "{"}], "q": "\"quoted\""}}}
</tool_call>)",
      ToolSyntax::Hermes);
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p.calls[0], "run",
              R"({"code": "if (a) { b(\"}\"); } // ]]", "opts": {"deep": [1, {"x": "{"}], "q": "\"quoted\""}})");
  EXPECT_EQ(p.content, "");
}

TEST(HermesToolCalls, ArgumentsAsJsonTextAndTheLastBlockUnclosed) {
  const ParsedAnswer p = parse_tool_calls(
      "<tool_call>{\"name\": \"a\", \"arguments\": \"{\\\"k\\\": 1}\"}</tool_call><tool_call>{\"name\": \"b\", \"arguments\": {}}",
      ToolSyntax::Hermes);
  ASSERT_EQ(p.calls.size(), 2u);
  expect_call(p.calls[0], "a", R"({"k": 1})");
  expect_call(p.calls[1], "b", "{}");
}

TEST(HermesToolCalls, BrokenCallsStayContent) {
  const std::string broken = "I will call it.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par\n</tool_call> done";
  ParsedAnswer p = parse_tool_calls(broken, ToolSyntax::Hermes);
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, broken);
  // No name; arguments not an object; an empty block: content, while the good one is a call.
  p = parse_tool_calls("<tool_call>{\"arguments\": {}}</tool_call>x<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>"
                       "<tool_call></tool_call><tool_call>{\"name\": \"g\"}</tool_call>",
                       ToolSyntax::Hermes);
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p.calls[0], "g", "{}");
  EXPECT_EQ(p.content, "<tool_call>{\"arguments\": {}}</tool_call>x<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>"
                       "<tool_call></tool_call>");
}

TEST(HermesToolCalls, PlainAnswersAreContent) {
  for (const char* text : {"Paris is sunny.", "", "Use {\"name\": x} as a template", "<tool_call is a tag"}) {
    const ParsedAnswer p = parse_tool_calls(text, ToolSyntax::Hermes);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

TEST(Llama3ToolCalls, BareObjectAndPythonTag) {
  ParsedAnswer p = parse_tool_calls(R"({"name": "get_weather", "parameters": {"city": "Paris", "days": [1, 2]}})",
                                    ToolSyntax::Llama3);
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p.calls[0], "get_weather", R"({"city": "Paris", "days": [1, 2]})");
  EXPECT_EQ(p.content, "");
  p = parse_tool_calls("Checking.<|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"a \\\"b\\\" {c}\"}}",
                       ToolSyntax::Llama3);
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p.calls[0], "search", R"({"q": "a \"b\" {c}"})");
  EXPECT_EQ(p.content, "Checking.");
}

TEST(Llama3ToolCalls, SeveralSeparatedBySemicolonsOrLines) {
  const ParsedAnswer p = parse_tool_calls(
      "{\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", \"parameters\": {}}\n{\"name\": \"c\", \"arguments\": {\"y\": {\"z\": null}}}",
      ToolSyntax::Llama3);
  ASSERT_EQ(p.calls.size(), 3u);
  expect_call(p.calls[0], "a", R"({"x": 1})");
  expect_call(p.calls[1], "b", "{}");
  expect_call(p.calls[2], "c", R"({"y": {"z": null}})");
}

TEST(Llama3ToolCalls, ProseAndBrokenJsonAreContent) {
  for (const char* text : {"The weather is {\"name\": \"sunny\"}", "{\"name\": \"a\", \"parameters\": {\"x\": 1}",
                           "{\"name\": \"a\", \"parameters\": {}} and then some words", "{\"city\": \"Paris\"}"}) {
    const ParsedAnswer p = parse_tool_calls(text, ToolSyntax::Llama3);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

TEST(MistralToolCalls, ArrayAfterTheMarker) {
  const ParsedAnswer p = parse_tool_calls(
      R"([TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1b2c3d4e"}, {"name": "note", "arguments": {"text": "[1] {2} \"3\""}}])",
      ToolSyntax::Mistral);
  ASSERT_EQ(p.calls.size(), 2u);
  expect_call(p.calls[0], "get_weather", R"({"city": "Paris"})");
  expect_call(p.calls[1], "note", R"({"text": "[1] {2} \"3\""})");
  EXPECT_EQ(p.content, "");
}

TEST(MistralToolCalls, WithoutItsControlToken) {
  // [TOOL_CALLS] is a control token: a detokenizer that drops those leaves the array alone.
  const ParsedAnswer p = parse_tool_calls(R"( [{"name": "f", "arguments": {"a": [1, 2]}}])", ToolSyntax::Mistral);
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p.calls[0], "f", R"({"a": [1, 2]})");
}

TEST(MistralToolCalls, BrokenIsContent) {
  for (const char* text : {"[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}", "[TOOL_CALLS] not json",
                           "[TOOL_CALLS] [{\"arguments\": {}}]", "Sure: [1, 2, 3]"}) {
    const ParsedAnswer p = parse_tool_calls(text, ToolSyntax::Mistral);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

TEST(GenericToolCalls, WholeAnswerAsJson) {
  ParsedAnswer p = parse_tool_calls("```json\n{\"name\": \"f\", \"arguments\": {\"k\": \"v\"}}\n```", ToolSyntax::Json);
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p.calls[0], "f", R"({"k": "v"})");
  p = parse_tool_calls(R"({"tool_calls": [{"type": "function", "function": {"name": "g", "arguments": "{\"n\": 2}"}}]})",
                       ToolSyntax::Json);
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p.calls[0], "g", R"({"n": 2})");
  p = parse_tool_calls(R"([{"name": "a", "parameters": {}}, {"name": "b", "arguments": {"x": [{}]}}])", ToolSyntax::Hermes);
  ASSERT_EQ(p.calls.size(), 2u);
  expect_call(p.calls[1], "b", R"({"x": [{}]})");
  for (const char* text : {"{\"answer\": 42}", "[]", "{\"name\": \"f\", \"arguments\": {}} trailing", "just words"}) {
    p = parse_tool_calls(text, ToolSyntax::Json);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

}  // namespace
}  // namespace weir::openai
