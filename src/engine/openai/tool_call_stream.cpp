#include "engine/openai/tool_call_stream.h"

#include <cctype>
#include <utility>

#include "engine/openai/forced_tool_calls.h"

namespace weir::openai {

namespace {

std::string_view marker_of(ToolSyntax s) {
  switch (s) {
    case ToolSyntax::Hermes: return "<tool_call>";
    case ToolSyntax::Mistral: return "[TOOL_CALLS]";
    case ToolSyntax::Llama3: return "<|python_tag|>";
    case ToolSyntax::Json: return {};
  }
  return {};
}

// The length of the longest end of `s` that begins `marker` (kept back: the
// next text may finish the marker).
size_t partial_marker(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

}  // namespace

ToolCallStream::ToolCallStream(ToolSyntax syntax, nlohmann::json forced_choice)
    : syntax_(syntax), forced_(std::move(forced_choice)) {
  holding_ = !forced_.is_null();
}

std::string ToolCallStream::push(std::string_view text) {
  held_.append(text);
  if (holding_) return {};
  if (!decided_) {
    // The answer's first visible character: one that may open a call as a
    // whole (generic JSON, Llama 3's bare object, Mistral's array without
    // its marker) holds everything.
    size_t i = 0;
    while (i < held_.size() && std::isspace(static_cast<unsigned char>(held_[i]))) ++i;
    if (i == held_.size()) return {};
    decided_ = true;
    if (held_[i] == '{' || held_[i] == '[' || held_[i] == '`') {
      holding_ = true;
      return {};
    }
  }
  const std::string_view marker = marker_of(syntax_);
  if (marker.empty()) return std::exchange(held_, {});
  const size_t at = held_.find(marker);
  const size_t out = at != std::string::npos ? at : held_.size() - partial_marker(held_, marker);
  holding_ = at != std::string::npos;
  std::string now = held_.substr(0, out);
  held_.erase(0, out);
  return now;
}

ParsedAnswer ToolCallStream::finish() {
  std::string rest = std::exchange(held_, {});
  return parse_answer(rest, syntax_, forced_);
}

ParsedAnswer parse_answer(std::string_view text, ToolSyntax syntax, const nlohmann::json& forced_choice) {
  return forced_choice.is_null() ? parse_tool_calls(text, syntax) : parse_forced_calls(text, forced_choice, syntax);
}

}  // namespace weir::openai
