// The tool fields of a chat request: each wrong shape a 400 naming the
// field at fault, as OpenAI's API answers; the messages of a tool-calling
// turn taken, and their arguments given to the template as objects.
#include "engine/openai/tool_request.h"

#include <gtest/gtest.h>

namespace weir::openai {
namespace {

using nlohmann::json;

json body_with(const char* extra) {
  json b = json::parse(extra);
  if (!b.contains("messages")) b["messages"] = json::parse(R"([{"role": "user", "content": "Hi"}])");
  return b;
}

const char* kTool = R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}})";

// The request is refused with a 400 naming `param`.
void expect_refused(const std::string& extra, const std::string& param) {
  try {
    parse_chat_request(body_with(extra.c_str()));
    ADD_FAILURE() << "taken: " << extra;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400) << extra;
    EXPECT_EQ(e.param, param) << extra << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(param), std::string::npos) << e.what();
  }
}

TEST(ToolRequest, ToolShapes) {
  expect_refused(R"({"tools": {"type": "function"}})", "tools");
  expect_refused(R"({"tools": [3]})", "tools[0]");
  expect_refused(R"({"tools": [{"type": "retrieval", "function": {"name": "f"}}]})", "tools[0].type");
  expect_refused(R"({"tools": [{"type": "function"}]})", "tools[0].function");
  expect_refused(R"({"tools": [{"type": "function", "function": {"description": "d"}}]})", "tools[0].function.name");
  expect_refused(R"({"tools": [{"type": "function", "function": {"name": "has space"}}]})", "tools[0].function.name");
  expect_refused(R"({"tools": [{"type": "function", "function": {"name": ""}}]})", "tools[0].function.name");
  expect_refused(std::string(R"({"tools": [{"type": "function", "function": {"name": ")") + std::string(65, 'a') + "\"}}]}",
                 "tools[0].function.name");
  expect_refused(std::string(R"({"tools": [)") + kTool + "," + kTool + "]}", "tools[1].function.name");
  expect_refused(R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": "object"}}]})",
                 "tools[0].function.parameters");
  expect_refused(R"({"tools": [{"type": "function", "function": {"name": "f", "description": 3}}]})",
                 "tools[0].function.description");
  expect_refused(R"({"tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}]})",
                 "tools[0].function.strict");
}

TEST(ToolRequest, ToolChoiceShapes) {
  const std::string tools = std::string(R"("tools": [)") + kTool + "]";
  expect_refused(R"({"tool_choice": "required"})", "tool_choice");
  expect_refused("{" + tools + R"(, "tool_choice": "sometimes"})", "tool_choice");
  expect_refused("{" + tools + R"(, "tool_choice": 1})", "tool_choice");
  expect_refused("{" + tools + R"(, "tool_choice": {"type": "custom", "function": {"name": "get_weather"}}})",
                 "tool_choice.type");
  expect_refused("{" + tools + R"(, "tool_choice": {"type": "function"}})", "tool_choice.function");
  expect_refused("{" + tools + R"(, "tool_choice": {"type": "function", "function": {"name": "other"}}})",
                 "tool_choice.function.name");
  expect_refused(R"({"tool_choice": {"type": "function", "function": {"name": "get_weather"}}})",
                 "tool_choice.function.name");
  expect_refused("{" + tools + R"(, "parallel_tool_calls": 1})", "parallel_tool_calls");
  for (const char* choice : {R"("none")", R"("auto")", R"("required")",
                             R"({"type": "function", "function": {"name": "get_weather"}})"}) {
    const GenerationRequest r = parse_chat_request(body_with(("{" + tools + R"(, "tool_choice": )" + choice + "}").c_str()));
    EXPECT_EQ(r.tool_choice, json::parse(choice));
    EXPECT_EQ(r.tools.size(), 1u);
    const bool forced = std::string(choice) != R"("none")" && std::string(choice) != R"("auto")";
    EXPECT_EQ(r.format.kind, forced ? OutputFormat::Kind::JsonSchema : OutputFormat::Kind::Text) << choice;
  }
  // No tools at all, or an empty list: none.
  EXPECT_TRUE(parse_chat_request(body_with(R"({"tools": []})")).tools.is_null());
  EXPECT_TRUE(parse_chat_request(body_with(R"({"tool_choice": "none"})")).tools.is_null());
}

TEST(ToolRequest, ToolTurnsInTheMessages) {
  const char* turn = R"({"messages": [{"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "21"}]})";
  const GenerationRequest r = parse_chat_request(body_with(turn));
  const json m = messages_for_template(r.messages);
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["arguments"], json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(r.messages[1]["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Paris\"}");  // as given
  // Arguments that are not JSON go to the template as they came.
  const json odd = messages_for_template(json::parse(
      R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "not json"}}, {"function": {"name": "g"}}]}])"));
  EXPECT_EQ(odd[0]["tool_calls"][0]["function"]["arguments"], "not json");
  EXPECT_FALSE(odd[0]["tool_calls"][1]["function"].contains("arguments"));

  expect_refused(R"({"messages": [{"role": "user", "content": "a", "tool_calls": []}]})", "messages[0].tool_calls");
  expect_refused(R"({"messages": [{"role": "assistant", "tool_calls": {}}]})", "messages[0].tool_calls");
  expect_refused(R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "function"}]}]})",
                 "messages[0].tool_calls[0].function");
  expect_refused(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}]})",
                 "messages[0].tool_calls[0].function.name");
  expect_refused(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]}]})",
                 "messages[0].tool_calls[0].function.arguments");
  expect_refused(R"({"messages": [{"role": "tool", "content": "21"}]})", "messages[0].tool_call_id");
}

}  // namespace
}  // namespace weir::openai
