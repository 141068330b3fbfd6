#include "engine/openai/output_grammar.h"

#include <nlohmann/json.hpp>

#include <string>

namespace weir::openai {
namespace {

using nlohmann::json;

// XGrammar 0.2.8 writes a string with minLength or maxLength as any bytes
// but quote, backslash, CR and LF: raw control characters get through (not
// JSON) and no escape can be written. Such strings are given the same bounds
// as a pattern of JSON string characters instead, which it converts as a
// JSON string's content (escapes counted as one character each, as
// minLength and maxLength count them). The pattern leaves out the UTF-16
// surrogates too: XGrammar takes them as characters, but their UTF-8 bytes
// are not UTF-8 (the answer would hold three U+FFFD for one).
void bounded_strings_as_patterns(json& s, int depth = 0) {
  if (depth > 64) return;  // (XGrammar refuses deeper schemas itself)
  if (s.is_array()) {
    for (json& x : s) bounded_strings_as_patterns(x, depth + 1);
    return;
  }
  if (!s.is_object()) return;
  const bool bounded = s.contains("minLength") || s.contains("maxLength");
  if (bounded && s.value("type", json()) == "string" && !s.contains("pattern") && !s.contains("format") &&
      !s.contains("enum") && !s.contains("const")) {
    const json lo = s.value("minLength", json(0)), hi = s.value("maxLength", json());
    auto count = [](const json& v) { return v.is_number_integer() && v.get<int64_t>() >= 0; };
    if (count(lo) && (hi.is_null() || count(hi))) {
      const std::string bound =
          "{" + std::to_string(lo.get<int64_t>()) + "," + (hi.is_null() ? "" : std::to_string(hi.get<int64_t>())) + "}";
      s["pattern"] = R"(([^"\\\x00-\x1f\ud800-\udfff]|\\(["\\/bfnrt]|u[0-9a-fA-F]{4})))" + bound;
      s.erase("minLength");
      s.erase("maxLength");
    }
  }
  for (auto& [key, v] : s.items())
    if (key != "enum" && key != "const" && key != "default" && key != "examples") bounded_strings_as_patterns(v, depth + 1);
}

std::string schema_for_xgrammar(const std::string& text) {
  json s = json::parse(text, nullptr, false);
  if (s.is_discarded()) return text;  // (XGrammar says what is wrong)
  bounded_strings_as_patterns(s);
  return s.dump();
}

}  // namespace

std::shared_ptr<const CompiledGrammar> output_grammar(GrammarCompiler* compiler, const OutputFormat& f) {
  if (f.kind == OutputFormat::Kind::Text) return nullptr;
  const std::string field = f.field.empty() ? "response_format" : f.field;
  if (!compiler) throw bad_request(field, "'" + field + "': constrained output is not available in this runtime");
  GrammarSpec spec;
  spec.text = f.kind == OutputFormat::Kind::JsonSchema ? schema_for_xgrammar(f.text) : f.text;
  switch (f.kind) {
    case OutputFormat::Kind::JsonObject: spec.kind = GrammarSpec::Kind::JsonObject; break;
    case OutputFormat::Kind::JsonSchema: spec.kind = GrammarSpec::Kind::JsonSchema; break;
    default: spec.kind = GrammarSpec::Kind::Gbnf; break;
  }
  try {
    return compiler->compile(spec);
  } catch (const GrammarError& e) {
    std::string why = e.what();
    if (why.size() > 500) why = why.substr(0, 500) + "...";
    throw bad_request(field, "'" + field + "' does not compile: " + why);
  }
}

std::vector<std::pair<int32_t, float>> checked_logit_bias(const std::vector<std::pair<int32_t, float>>& bias,
                                                          int64_t n_vocab) {
  for (const auto& [id, b] : bias)
    if (id < 0 || id >= n_vocab)
      throw bad_request("logit_bias", "'logit_bias' names token " + std::to_string(id) + ", past the vocabulary (0 to " +
                                          std::to_string(n_vocab - 1) + ")");
  return bias;
}

}  // namespace weir::openai
