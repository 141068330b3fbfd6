// OpenAI's response objects: chat.completion and its stream chunks,
// text_completion, usage, logprobs, and server-sent events framing.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/openai/tool_calls.h"

namespace weir::openai {

struct TokenLogprob {
  std::string token;  // the text of the token (may be part of a character)
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;  // most likely first
};

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

struct ResponseHead {
  std::string id;       // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;  // seconds since the epoch
  std::string model;
};

// Seconds since the epoch: the `created` of response objects.
int64_t now_seconds();

nlohmann::json usage_json(const Usage& u);
// One choice of a whole answer, at `index` of the response's choices.
// finish_reason: "stop" or "length" ("tool_calls" with calls). With calls
// (non-empty): message.tool_calls, each {"id", "type": "function",
// "function": {"name", "arguments"}}, and the content null when the text
// outside them is only white space. reasoning (a Harmony model's analysis,
// engine/openai/harmony.h), when not empty: message.reasoning_content, as
// llama-server and DeepSeek's API name it.
nlohmann::json chat_choice(size_t index, const std::string& text, const std::string& finish_reason,
                           const std::vector<TokenLogprob>* logprobs, const std::vector<ToolCall>* calls = nullptr,
                           const std::string* reasoning = nullptr);
nlohmann::json text_choice(size_t index, const std::string& text, const std::string& finish_reason,
                           const std::vector<TokenLogprob>* logprobs);
// A whole answer: its choices (an array of the above, in index order) and
// the usage of all of them.
nlohmann::json chat_completion(const ResponseHead& h, nlohmann::json choices, const Usage& u);
nlohmann::json text_completion(const ResponseHead& h, nlohmann::json choices, const Usage& u);
// Stream chunks of choice `choice`: its first carries the role; its last an
// empty delta and the finish reason (finish_reason "" for the others); a
// usage chunk, when asked for, has no choices.
nlohmann::json chat_chunk(const ResponseHead& h, size_t choice, const std::string* role, const std::string& text,
                          const std::string& finish_reason, const std::vector<TokenLogprob>* logprobs);
nlohmann::json text_chunk(const ResponseHead& h, size_t choice, const std::string& text, const std::string& finish_reason,
                          const std::vector<TokenLogprob>* logprobs);
// A chunk of streamed reasoning: delta.reasoning_content.
nlohmann::json reasoning_chunk(const ResponseHead& h, size_t choice, const std::string& text,
                               const std::vector<TokenLogprob>* logprobs);
// A streamed tool call of choice `choice`, as OpenAI streams one: a chunk
// whose delta opens call `index` ({"index", "id", "type", "function":
// {"name", "arguments": ""}}), then one with its arguments ({"index",
// "function": {"arguments"}}).
std::vector<nlohmann::json> tool_call_chunks(const ResponseHead& h, size_t choice, size_t index, const ToolCall& call);
nlohmann::json usage_chunk(const ResponseHead& h, bool chat, const Usage& u);

// "data: {json}\n\n", and the stream's end "data: [DONE]\n\n".
std::string sse_event(const nlohmann::json& j);
std::string sse_done();

}  // namespace weir::openai
