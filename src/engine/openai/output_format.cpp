#include "engine/openai/output_format.h"

#include "engine/openai/json_body.h"

#include <cmath>
#include <string>

namespace weir::openai {
namespace {

using nlohmann::json;

std::string format_dump(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

void set_format(GenerationRequest& r, const char* from, OutputFormat f, const char** taken) {
  if (*taken)
    throw bad_request(from, "'" + std::string(from) + "' and '" + *taken +
                                "' both constrain the output: send one of them");
  *taken = from;
  f.field = from;
  r.format = std::move(f);
}

// A schema as OpenAI's and llama-server's take it: an object (or true).
std::string schema_text(const json& s, const std::string& at) {
  if (!s.is_object() && !s.is_boolean())
    throw bad_request(at, "'" + at + "' must be a JSON schema (an object), got " + format_dump(s));
  return s.dump();
}

}  // namespace

void read_output_format(const json& body, GenerationRequest& r) {
  const char* taken = nullptr;
  if (const json* rf = given_field(body, "response_format")) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
      throw bad_request("response_format", "'response_format' must be an object with a 'type' (text, json_object or "
                                           "json_schema), got " + format_dump(*rf));
    const std::string type = (*rf)["type"].get<std::string>();
    if (type == "json_object") {
      // llama-server's form with a schema beside the type is taken too.
      if (const json* s = given_field(*rf, "schema"))
        set_format(r, "response_format", {OutputFormat::Kind::JsonSchema, schema_text(*s, "response_format.schema")},
                   &taken);
      else
        set_format(r, "response_format", {OutputFormat::Kind::JsonObject, ""}, &taken);
    } else if (type == "json_schema") {
      const json* js = given_field(*rf, "json_schema");
      if (!js || !js->is_object())
        throw bad_request("response_format.json_schema",
                          "'response_format' of type json_schema needs 'json_schema': {\"name\": ..., \"schema\": {...}}");
      if (const json* n = given_field(*js, "name"); n && !n->is_string())
        throw bad_request("response_format.json_schema.name", "'response_format.json_schema.name' must be a string");
      if (const json* st = given_field(*js, "strict"); st && !st->is_boolean())
        throw bad_request("response_format.json_schema.strict", "'response_format.json_schema.strict' must be a boolean");
      const json* s = given_field(*js, "schema");
      // No schema: any JSON object (OpenAI's API requires one; a missing one asks for nothing more).
      if (!s)
        set_format(r, "response_format", {OutputFormat::Kind::JsonObject, ""}, &taken);
      else
        set_format(r, "response_format",
                   {OutputFormat::Kind::JsonSchema, schema_text(*s, "response_format.json_schema.schema")}, &taken);
    } else if (type != "text") {
      throw bad_request("response_format.type",
                        "'response_format.type' must be text, json_object or json_schema, got '" + type + "'");
    }
  }
  if (const json* g = given_field(body, "grammar")) {
    if (!g->is_string()) throw bad_request("grammar", "'grammar' must be a string (a GBNF grammar), got " + format_dump(*g));
    if (!g->get_ref<const std::string&>().empty())
      set_format(r, "grammar", {OutputFormat::Kind::Grammar, g->get<std::string>()}, &taken);
  }
  if (const json* s = given_field(body, "json_schema"))
    set_format(r, "json_schema", {OutputFormat::Kind::JsonSchema, schema_text(*s, "json_schema")}, &taken);

  if (const json* lb = given_field(body, "logit_bias")) {
    if (!lb->is_object())
      throw bad_request("logit_bias", "'logit_bias' must be an object of token ids to biases, got " + format_dump(*lb));
    for (const auto& [key, v] : lb->items()) {
      size_t used = 0;
      long long id = -1;
      try {
        id = std::stoll(key, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != key.size() || key.empty() || id < 0 || id > INT32_MAX || !std::isdigit(static_cast<unsigned char>(key[0])))
        throw bad_request("logit_bias", "'logit_bias' keys must be token ids, got \"" +
                                            format_dump(json(key)).substr(1, std::min<size_t>(key.size(), 64)) + "\"");
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < -100 || v.get<double>() > 100)
        throw bad_request("logit_bias", "'logit_bias' values must be numbers from -100 to 100, got " + format_dump(v) +
                                            " for token " + key);
      r.logit_bias.emplace_back(int32_t(id), v.get<float>());
    }
  }
}

}  // namespace weir::openai
