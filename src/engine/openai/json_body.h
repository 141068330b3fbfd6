// A request body as JSON, read defensively: before the JSON library sees
// it, one pass over the bytes checks the nesting depth (the library's dump
// and copy recurse, so 100,000 levels of '[' would overflow the stack) and
// that every string is well-formed UTF-8 (the library would refuse it with
// a message quoting the raw bytes). Either fault is an ApiError (400) that
// names the field, as "messages[0].content".
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace weir::openai {

struct JsonLimits {
  int max_depth = 64;  // arrays and objects inside each other; OpenAI bodies with tools' schemas need ~20
};

// The JSON value of `body`. Throws ApiError (400): nesting deeper than
// max_depth, a string that is not UTF-8 (naming its field), JSON syntax
// (the byte offset; no raw bytes of the body are quoted).
nlohmann::json parse_json_body(std::string_view body, const JsonLimits& limits = {});

// body's field `name`, or nullptr when absent or null (null means "the
// default" in OpenAI's bodies).
const nlohmann::json* given_field(const nlohmann::json& body, const char* name);
// What a value is, for messages: "a string", "an integer", "null", ...
const char* json_kind(const nlohmann::json& v);

// `s` with every ill-formed UTF-8 sequence replaced by U+FFFD: text that
// goes to a client (an error message quoting input) is always UTF-8.
std::string utf8_or_replacement(std::string_view s);

}  // namespace weir::openai
