// gpt-oss's Harmony answers read back into OpenAI's fields
// (text/harmony.h splits them): the analysis channel becomes
// reasoning_content (as llama-server gives it), the final channel and
// commentary without a recipient the content, and a message to
// functions.NAME a tool call, with tools in the request and its body a
// JSON object (otherwise it stays in the content as written, header and
// all, as do messages to the built-in browser and python tools).
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "engine/openai/tool_calls.h"
#include "text/harmony.h"

namespace weir::openai {

using weir::is_harmony_template;

struct HarmonyAnswer {
  std::string content;    // final and commentary text
  std::string reasoning;  // analysis text
  std::vector<ToolCall> calls;
};

// Reads an answer as it streams: push() returns the reasoning and content
// that may go out now (calls and a marker's first bytes are held);
// finish() returns what was held, and the calls. What push gave plus what
// finish gives equals parse_harmony of the whole text.
class HarmonyStream {
 public:
  explicit HarmonyStream(bool with_tools) : tools_(with_tools) {}
  HarmonyAnswer push(std::string_view text);
  HarmonyAnswer finish();

 private:
  HarmonyAnswer read(HarmonyText t);
  bool tools_;
  HarmonyReader reader_;
  std::vector<ToolCall> calls_;  // returned by finish
};

// The whole answer read at once.
HarmonyAnswer parse_harmony(std::string_view text, bool with_tools);

// The messages as gpt-oss's template reads them: an assistant message's
// reasoning_content (what weir and llama-server return) as its 'thinking'
// (the template renders that before a tool call; beside calls only where
// there is no content, since it refuses both), and no 'content' where it
// is null beside tool calls (the template's "... in message.content"
// refuses null).
nlohmann::json harmony_messages(const nlohmann::json& messages);

}  // namespace weir::openai
