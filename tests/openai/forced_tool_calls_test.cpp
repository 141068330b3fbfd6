// The schema a forced tool call is constrained to, written out by hand as
// vLLM's guided decoding builds it, and the forced answers read back.
#include "engine/openai/forced_tool_calls.h"

#include <gtest/gtest.h>

namespace weir::openai {
namespace {

using nlohmann::json;

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather",
    "parameters": {"type": "object", "properties": {"city": {"$ref": "#/$defs/City"}}, "required": ["city"],
                   "$defs": {"City": {"type": "string"}}}}},
  {"type": "function", "function": {"name": "now"}}
])");

TEST(ForcedToolCalls, WhichChoicesForce) {
  EXPECT_TRUE(forces_tool_call("required"));
  EXPECT_TRUE(forces_tool_call(json::parse(R"({"type": "function", "function": {"name": "now"}})")));
  EXPECT_FALSE(forces_tool_call("auto"));
  EXPECT_FALSE(forces_tool_call("none"));
  EXPECT_FALSE(forces_tool_call(nullptr));
  EXPECT_EQ(forced_tool_name(json::parse(R"({"type": "function", "function": {"name": "now"}})")), "now");
  EXPECT_EQ(forced_tool_name("required"), "");
}

TEST(ForcedToolCalls, NamedIsTheFunctionsParameters) {
  const json choice = json::parse(R"({"type": "function", "function": {"name": "get_weather"}})");
  EXPECT_EQ(forced_call_schema(kTools, choice, true), json::parse(R"({"type": "object",
      "properties": {"city": {"$ref": "#/$defs/City"}}, "required": ["city"], "$defs": {"City": {"type": "string"}}})"));
  // A function without parameters takes an empty object.
  EXPECT_EQ(forced_call_schema(kTools, json::parse(R"({"type": "function", "function": {"name": "now"}})"), true),
            json::parse(R"({"type": "object", "properties": {}})"));
}

TEST(ForcedToolCalls, RequiredIsAnArrayOfAnyTool) {
  const json want = json::parse(R"({"type": "array", "minItems": 1, "items": {"anyOf": [
      {"type": "object", "properties": {"name": {"type": "string", "enum": ["get_weather"]},
         "parameters": {"type": "object", "properties": {"city": {"$ref": "#/$defs/City"}}, "required": ["city"]}},
       "required": ["name", "parameters"]},
      {"type": "object", "properties": {"name": {"type": "string", "enum": ["now"]},
         "parameters": {"type": "object", "properties": {}}},
       "required": ["name", "parameters"]}]},
    "$defs": {"City": {"type": "string"}}})");
  EXPECT_EQ(forced_call_schema(kTools, "required", true), want);
  json one = want;
  one["maxItems"] = 1;
  EXPECT_EQ(forced_call_schema(kTools, "required", false), one);
  EXPECT_TRUE(forced_call_schema(kTools, "auto", true).is_null());
}

TEST(ForcedToolCalls, ReadBack) {
  const json named = json::parse(R"({"type": "function", "function": {"name": "get_weather"}})");
  ParsedAnswer p = parse_forced_calls(R"({ "city" : "Paris {x}" })", named, ToolSyntax::Json);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(p.calls[0].arguments), json::parse(R"({"city": "Paris {x}"})"));
  EXPECT_EQ(p.content, "");
  p = parse_forced_calls(R"([{"name": "now", "parameters": {}}, {"name": "get_weather", "parameters": {"city": "Rome"}}])",
                         "required", ToolSyntax::Json);
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "now");
  EXPECT_EQ(p.calls[0].arguments, "{}");
  EXPECT_EQ(p.calls[1].name, "get_weather");
  EXPECT_EQ(json::parse(p.calls[1].arguments), json::parse(R"({"city": "Rome"})"));
  // Unconstrained (no grammar enforced it): read as the template's syntax, else content.
  p = parse_forced_calls("<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>", "required", ToolSyntax::Hermes);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "now");
  p = parse_forced_calls("I cannot.", named, ToolSyntax::Hermes);
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, "I cannot.");
  p = parse_forced_calls("[{\"name\": \"now\"}, 3]", "required", ToolSyntax::Json);
  EXPECT_TRUE(p.calls.empty());
}

}  // namespace
}  // namespace weir::openai
