// Every field a request body may hold, and what weir does with it: takes
// it (request.cpp reads it), takes it only at its default (a field weir
// does not implement yet, where the default asks for nothing), takes it as
// a label with no effect on the answer (user, metadata), or refuses it. A
// field in no list is unknown: a 400 naming it, as OpenAI's API answers,
// unless the caller accepts unknown fields (weir serve
// --accept-unknown-fields), which then get listed for its log.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace weir::openai {

enum class Endpoint { Chat, Completions, Embeddings };

enum class FieldUse {
  Taken,        // read and honoured
  DefaultOnly,  // only its default value (anything else: 400 naming it)
  Label,        // accepted, no effect on the answer (a caller's tag)
  Refused,      // any value but null: 400 naming it
};

struct FieldRule {
  const char* name;
  FieldUse use;
  // DefaultOnly: whether v is the default (null is always the default).
  bool (*is_default)(const nlohmann::json& v) = nullptr;
  const char* why = "";  // DefaultOnly, Refused: what the 400 says beside the name
};

// The rules of an endpoint's fields (OpenAI's, and the extras weir takes).
const std::vector<FieldRule>& field_rules(Endpoint e);

// Checks body's fields against the rules: the first field used against its
// rule is an ApiError (400) naming it; unknown fields are one too, or with
// accept_unknown are returned (the server logs them).
std::vector<std::string> check_fields(const nlohmann::json& body, Endpoint e, bool accept_unknown);

}  // namespace weir::openai
