// A streamed answer that may hold tool calls: text goes out as it comes
// until a call may begin (a marker of the syntax, <tool_call>, [TOOL_CALLS]
// or <|python_tag|>, or an answer that opens with '{', '[' or ``` and may be
// a call as a whole; a forced call from the start), then is held to the end
// and parsed there with parse_tool_calls, so the text streamed and the
// content parsed add up to what the whole answer gives.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "engine/openai/tool_calls.h"

namespace weir::openai {

class ToolCallStream {
 public:
  // forced_choice: the request's tool_choice when it forces a call (the
  // answer is held whole and read by parse_forced_calls), else null.
  ToolCallStream(ToolSyntax syntax, nlohmann::json forced_choice = nullptr);
  // New text of the answer; returns what may go out as content now.
  std::string push(std::string_view text);
  // At the end: the content held back that is no call, and the calls.
  ParsedAnswer finish();

 private:
  ToolSyntax syntax_;
  nlohmann::json forced_;
  std::string held_;  // from where a call may begin
  bool holding_ = false;    // a marker came: held to the end
  bool decided_ = false;    // the answer's first visible character came
};

// The whole answer read the same way (what finish gives for it streamed).
ParsedAnswer parse_answer(std::string_view text, ToolSyntax syntax, const nlohmann::json& forced_choice);

}  // namespace weir::openai
