// The request fields that shape the output itself: response_format
// (OpenAI's text, json_object, json_schema), llama-server's grammar (GBNF)
// and json_schema, and logit_bias. Read into GenerationRequest::format and
// ::logit_bias; the grammar is compiled when the answer starts
// (output_grammar.h), against the model's vocabulary.
#pragma once
#include <nlohmann/json.hpp>

#include "engine/openai/request.h"

namespace weir::openai {

// Reads the fields into r; ApiError (400) naming the field for a bad value,
// or for two of response_format (not text), grammar and json_schema at once.
void read_output_format(const nlohmann::json& body, GenerationRequest& r);

}  // namespace weir::openai
