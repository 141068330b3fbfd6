// OpenAI's request bodies for /v1/chat/completions and /v1/completions,
// checked and turned into one GenerationRequest. A field of the wrong type
// or out of range, one weir does not implement (but at its default), and an
// unknown one are each an ApiError (HTTP 400) naming it, shaped as OpenAI's
// errors are (request_fields.h lists every field and what weir does with it).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"

namespace weir::openai {

struct ApiError : Error {
  ApiError(int status, std::string type, std::string param, const std::string& message)
      : Error(message), status(status), type(std::move(type)), param(std::move(param)) {}
  int status;
  std::string type;   // "invalid_request_error", "authentication_error", ...
  std::string param;  // the field at fault, or ""
};
// {"error": {"message", "type", "param", "code"}}
nlohmann::json error_json(const ApiError& e);
ApiError bad_request(const std::string& param, const std::string& message);
// OpenAI's error type for an HTTP status: "invalid_request_error" (4xx),
// "authentication_error" (401), "not_found_error" (404), "server_overloaded"
// (503), "server_error" (5xx).
const char* error_type(int status);

// What the output must match, by constrained decoding (engine/grammar.h):
// each step's tokens are masked to those the grammar allows next.
struct OutputFormat {
  enum class Kind { Text, JsonObject, JsonSchema, Grammar };
  Kind kind = Kind::Text;
  std::string text;  // JsonSchema: the schema as JSON text; Grammar: GBNF
  std::string field;  // the request field that asked for it (for errors; "" : response_format)
};

// A completion's prompt: text, or token ids as sent.
struct CompletionPrompt {
  std::string text;
  std::vector<int32_t> tokens;  // non-empty: the prompt is these ids (text unused)
};

// Choices a request may ask for in all (prompts times n or best_of):
// OpenAI's limit on n.
constexpr int kMaxChoices = 128;

struct GenerationRequest {
  bool chat = false;
  nlohmann::json messages;        // chat: as given, for the chat template
  std::vector<CompletionPrompt> prompts;  // completions: one, or a list (n choices each, prompt-major)
  int n = 1;                      // choices per prompt, 1 to 128
  int best_of = 1;                // completions: candidates per prompt (>= n); the n best return
  bool echo = false;              // completions: each choice's text begins with its prompt's
  std::string suffix;             // completions: fill in the middle, the answer goes before this ("" : none)
  std::string model;
  int max_tokens = -1;            // -1: until the context is full
  float temperature = 1.0f;       // OpenAI's default
  float top_p = 1.0f;
  int top_k = 0;                  // 0: off (an extension, as llama-server's)
  float min_p = 0.0f;             // extension
  bool ignore_eos = false;        // extension (as llama-server's and vLLM's): generate max_tokens whatever comes
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  float presence_penalty = 0.0f, frequency_penalty = 0.0f;
  bool logprobs = false;
  int top_logprobs = 0;           // chat: 0..20 with logprobs; completions: logprobs = N
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  OutputFormat format;            // response_format, grammar, or a forced tool call's schema
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id, bias in [-100, 100] (ids checked at the answer)
  nlohmann::json tools;           // chat: the tools as given (null: none), for the template
  nlohmann::json tool_choice;     // chat: "none", "auto", "required" or {"type":"function",...} (null: auto)
  bool parallel_tool_calls = true;  // chat: false: one call at most
  std::string reasoning_effort;   // chat: "low", "medium" or "high" ("": not given), the chat template's variable
  std::vector<std::string> unknown_fields;  // taken with accept_unknown (for the log)
};

// A token id given in JSON: an integer from 0 to n_vocab - 1 (n_vocab 0:
// any that fits int32). Anything else (a float, 2^32 + 9259, -1) is an
// ApiError (400) naming `field` and quoting the value as sent.
int32_t token_id(const nlohmann::json& v, int64_t n_vocab, const std::string& field);

// accept_unknown: fields of no rule are listed in unknown_fields, not refused.
GenerationRequest parse_chat_request(const nlohmann::json& body, bool accept_unknown = false);
GenerationRequest parse_completion_request(const nlohmann::json& body, bool accept_unknown = false);

}  // namespace weir::openai
