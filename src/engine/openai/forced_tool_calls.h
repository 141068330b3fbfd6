// A call the request forces (tool_choice "required" or a named function),
// made valid whatever the template, as vLLM's guided decoding makes it: the
// answer is constrained (GenerationRequest::format, engine/grammar) to a
// JSON schema, and read back as calls.
//   named:    the function's `parameters` schema: the answer is the call's
//             arguments object;
//   required: an array of at least one (one with parallel_tool_calls false)
//             {"name": one of the tools' names, "parameters": that tool's
//             schema}, an anyOf over the tools.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "engine/openai/tool_calls.h"

namespace weir::openai {

// The name tool_choice forces ({"type": "function", "function": {"name"}}),
// or "" ("none", "auto", "required", null).
std::string forced_tool_name(const nlohmann::json& tool_choice);
// Whether tool_choice forces a call ("required" or a named function).
bool forces_tool_call(const nlohmann::json& tool_choice);

// The schema of the forced answer, or null when tool_choice forces none.
// tools: the request's, checked (tool_request.h). A tool without
// parameters takes {"type": "object", "properties": {}}; the $defs of the
// tools' schemas move to the top (where "#/$defs/..." finds them).
nlohmann::json forced_call_schema(const nlohmann::json& tools, const nlohmann::json& tool_choice, bool parallel);

// The calls in a forced answer: the arguments object of the named function,
// or the array of {"name", "parameters"}. An answer that is not that (no
// constraint enforced it) is read as an unforced one in `fallback` syntax.
ParsedAnswer parse_forced_calls(std::string_view text, const nlohmann::json& tool_choice, ToolSyntax fallback);

}  // namespace weir::openai
