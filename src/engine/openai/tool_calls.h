// Tool calls read back from a model's text, in the syntax its chat template
// taught it (the template's text tells which):
//   Hermes  <tool_call>{"name": ..., "arguments": {...}}</tool_call>, one block
//           a call, text around them (Hermes 2 Pro, Qwen 2.5 and 3, weir's
//           built-in Gemma template);
//   Llama3  the whole answer a JSON object {"name": ..., "parameters": {...}},
//           or several separated by ';' or new lines, after <|python_tag|> or not;
//   Mistral [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...];
//   Json    no syntax of its own: only the generic form below.
// Every syntax also takes the generic form: an answer that is as a whole a
// call object ({"name", "arguments" or "parameters"}, or {"function": {...}}),
// an array of them, or {"tool_calls": [...]}, within ```json fences or not
// (a Mistral answer whose control token [TOOL_CALLS] was not rendered, a
// model with no syntax). A call that does not parse (broken JSON, no name)
// stays in the content as the model wrote it.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace weir::openai {

enum class ToolSyntax { Hermes, Llama3, Mistral, Json };

// The syntax a chat template's text teaches: its markers (<tool_call>,
// [TOOL_CALLS], <|python_tag|> or Llama 3's "parameters" wording), else Json.
ToolSyntax tool_syntax_of(std::string_view chat_template);
const char* tool_syntax_name(ToolSyntax s);

struct ToolCall {
  std::string id;         // "call_" and 24 letters and digits
  std::string name;
  std::string arguments;  // a JSON object, as text
};

struct ParsedAnswer {
  std::string content;  // the text outside the calls (all of it when there are none)
  std::vector<ToolCall> calls;
};

// The calls in a model's whole answer.
ParsedAnswer parse_tool_calls(std::string_view text, ToolSyntax s);

// A call object's name and arguments ({"name", "arguments" or "parameters"},
// the arguments an object or a string holding one; or {"function": {...}}),
// with a fresh id; false when `v` is not one.
bool call_from_json(const nlohmann::json& v, ToolCall* out);
// "call_" and 24 random letters and digits, as OpenAI's ids look.
std::string new_call_id();

}  // namespace weir::openai
