// gpt-oss's answers in the Harmony format, read back into OpenAI's fields.
// The chat template ends the prompt with "<|start|>assistant"; the model
// then writes messages, each a header up to <|message|> and a body up to
// <|end|> (more follows), <|return|> or <|call|> (the end of generation):
//   <|channel|>analysis<|message|>thinking...<|end|>
//   <|start|>assistant<|channel|>final<|message|>the answer
// or, to call a tool (the recipient in the header, before or after the
// channel):
//   <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}
//   <|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{...}
// The analysis channel becomes reasoning_content (as llama-server gives
// it), the final channel and commentary without a recipient the content,
// and a message to functions.NAME a tool call (with tools in the request,
// its body a JSON object; otherwise it stays in the content as written).
// Text that carries no header at all (the model ignored the format, or a
// grammar forced plain JSON) is content as it is. The vocabulary renders
// <|channel|>, <|message|>, <|start|>, <|constrain|> and <|end|> into the
// text and ends generation at <|return|> and <|call|> (text/vocab.cpp), so
// the parser sees all of the above but the last terminator.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "engine/openai/tool_calls.h"

namespace weir::openai {

// Whether a chat template writes Harmony (gpt-oss's): it names <|channel|>.
bool is_harmony_template(std::string_view chat_template);

struct HarmonyAnswer {
  std::string content;    // final and commentary text
  std::string reasoning;  // analysis text
  std::vector<ToolCall> calls;
};

// Reads an answer as it streams: push() returns the reasoning and content
// that may go out now (a call's body and a marker's first bytes are held);
// finish() returns what was held, and the calls. What push gave plus what
// finish gives equals parse_harmony of the whole text.
class HarmonyStream {
 public:
  explicit HarmonyStream(bool with_tools) : tools_(with_tools) {}
  HarmonyAnswer push(std::string_view text);
  HarmonyAnswer finish();

 private:
  enum class Part { Header, Reasoning, Content, Call };
  void step(HarmonyAnswer& out, bool at_end);
  void open_message(std::string_view header, std::string_view raw);
  void close_message(HarmonyAnswer& out);

  bool tools_;
  std::string held_;  // not yet read
  Part part_ = Part::Header;
  std::string call_name_, call_body_, call_raw_;  // the message to a function being read
  std::vector<ToolCall> calls_;                   // read, returned by finish
};

// The whole answer read at once.
HarmonyAnswer parse_harmony(std::string_view text, bool with_tools);

// The messages as gpt-oss's template reads them: an assistant message's
// reasoning_content (what weir and llama-server return) as its 'thinking'
// (the template renders that before a tool call), and no 'content' where
// it is null beside tool calls (the template's "... in message.content"
// refuses null).
nlohmann::json harmony_messages(const nlohmann::json& messages);

}  // namespace weir::openai
