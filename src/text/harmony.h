// gpt-oss's answers in the Harmony format, split into what they say. The
// chat template ends the prompt with "<|start|>assistant"; the model then
// writes messages, each a header up to <|message|> and a body up to <|end|>
// (more follows), <|return|> or <|call|> (the end of generation):
//   <|channel|>analysis<|message|>thinking...<|end|>
//   <|start|>assistant<|channel|>final<|message|>the answer
// or, to call a tool (the recipient in the header, before or after the
// channel):
//   <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}
//   <|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{...}
// The analysis channel is reasoning, the final channel and commentary
// without a recipient the content, a message with a recipient a call.
// Text that carries no header at all (the model ignored the format, or a
// grammar forced plain JSON) is content as it is; a header the answer ended
// in (max_tokens) is dropped. The vocabulary renders <|channel|>,
// <|message|>, <|start|>, <|constrain|> and <|end|> into the text and ends
// generation at <|return|> and <|call|> (text/vocab.cpp, as llama.cpp), so
// the reader sees all of them but the last terminator.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace weir {

// Whether a chat template writes Harmony (gpt-oss's): it names <|channel|>.
bool is_harmony_template(std::string_view chat_template);

// A message to a recipient, whole.
struct HarmonyCall {
  std::string recipient;  // "functions.get_weather", "python", ...
  std::string text;       // the message as written, header and body
  std::string body;       // what follows <|message|>
};

struct HarmonyText {
  std::string reasoning, content;
  std::vector<HarmonyCall> calls;
};

// Reads an answer as it streams: push() returns the reasoning and content
// that may go out now (a marker's first bytes are held) and the calls that
// ended; finish() what remains. What push gave plus what finish gives is
// the same whatever the pieces the text came in.
class HarmonyReader {
 public:
  HarmonyText push(std::string_view text);
  HarmonyText finish();

 private:
  enum class Part { Header, Reasoning, Content, Call };
  void step(HarmonyText& out, bool at_end);
  void close_message(HarmonyText& out);

  std::string held_;  // not yet read
  Part part_ = Part::Header;
  bool reasoned_ = false;  // an analysis message came (the next starts on a new line)
  HarmonyCall call_;       // the message to a recipient being read
};

}  // namespace weir
