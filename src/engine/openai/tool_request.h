// A chat request's tool fields, checked as OpenAI's API checks them: each
// wrong shape a 400 naming the field at fault (tools[1].function.name,
// tool_choice, messages[2].tool_calls[0].function.arguments, ...).
//   tools               [{"type": "function", "function": {"name",
//                       "description"?, "parameters"?, "strict"?}}], names
//                       of 1 to 64 letters, digits, '_' or '-', each once
//                       ([]: no tools);
//   tool_choice         "none", "auto", "required" (needs tools) or
//                       {"type": "function", "function": {"name"}} naming
//                       one of the tools;
//   parallel_tool_calls a boolean.
// The legacy functions/function_call stay refused (request_fields.cpp).
#pragma once
#include <nlohmann/json.hpp>

#include "engine/openai/request.h"

namespace weir::openai {

// Reads tools, tool_choice and parallel_tool_calls into r; a forced call
// (forced_tool_calls.h) sets r.format to its JSON schema.
void read_tool_fields(const nlohmann::json& body, GenerationRequest& r);

// The tool turns of the messages: an assistant's tool_calls (a list of
// {"id"?, "type": "function", "function": {"name", "arguments": a JSON
// object as text, or the object}}; its content may then be null)
// and a tool message's tool_call_id (a string).
void check_tool_messages(const nlohmann::json& messages);

// The messages as the chat template gets them: each tool call's arguments
// as an object where they came as JSON text (templates write them with
// tojson, as Hugging Face's and vLLM's do).
nlohmann::json messages_for_template(const nlohmann::json& messages);

}  // namespace weir::openai
