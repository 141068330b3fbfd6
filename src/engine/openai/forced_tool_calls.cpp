#include "engine/openai/forced_tool_calls.h"

namespace weir::openai {

using nlohmann::json;

std::string forced_tool_name(const json& tool_choice) {
  if (!tool_choice.is_object()) return {};
  const auto f = tool_choice.find("function");
  if (f == tool_choice.end() || !f->is_object()) return {};
  const auto n = f->find("name");
  return n != f->end() && n->is_string() ? n->get<std::string>() : std::string();
}

bool forces_tool_call(const json& tool_choice) { return tool_choice == "required" || !forced_tool_name(tool_choice).empty(); }

namespace {

// A tool's parameters schema without its $defs (moved into `defs`).
json parameters_of(const json& tool, json* defs) {
  const json& f = tool.at("function");
  json p = f.contains("parameters") && f["parameters"].is_object() ? f["parameters"]
                                                                    : json{{"type", "object"}, {"properties", json::object()}};
  if (p.contains("$defs") && p["$defs"].is_object()) {
    for (const auto& [k, v] : p["$defs"].items()) (*defs)[k] = v;
    p.erase("$defs");
  }
  return p;
}

std::string compact(std::string_view s) {
  const json v = json::parse(s.begin(), s.end(), nullptr, false);
  return v.is_discarded() ? std::string(s) : v.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

json forced_call_schema(const json& tools, const json& tool_choice, bool parallel) {
  if (!forces_tool_call(tool_choice) || !tools.is_array()) return nullptr;
  json defs = json::object();
  json schema;
  const std::string name = forced_tool_name(tool_choice);
  if (!name.empty()) {
    for (const json& t : tools)
      if (t.at("function").value("name", "") == name) schema = parameters_of(t, &defs);
    if (schema.is_null()) return nullptr;
  } else {
    json any = json::array();
    for (const json& t : tools) {
      const std::string n = t.at("function").value("name", "");
      any.push_back({{"type", "object"},
                     {"properties", {{"name", {{"type", "string"}, {"enum", {n}}}}, {"parameters", parameters_of(t, &defs)}}},
                     {"required", {"name", "parameters"}}});
    }
    schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", any}}}};
    if (!parallel) schema["maxItems"] = 1;
  }
  if (!defs.empty()) schema["$defs"] = defs;
  return schema;
}

ParsedAnswer parse_forced_calls(std::string_view text, const json& tool_choice, ToolSyntax fallback) {
  const json v = json::parse(text.begin(), text.end(), nullptr, false);
  const std::string name = forced_tool_name(tool_choice);
  ParsedAnswer p;
  if (!v.is_discarded() && !name.empty() && v.is_object()) {
    p.calls.push_back(ToolCall{new_call_id(), name, compact(text)});
    return p;
  }
  if (!v.is_discarded() && name.empty() && v.is_array() && !v.empty()) {
    for (const json& c : v) {
      ToolCall t;
      if (!call_from_json(c, &t)) {
        p.calls.clear();
        break;
      }
      p.calls.push_back(std::move(t));
    }
    if (!p.calls.empty()) return p;
  }
  return parse_tool_calls(text, fallback);
}

}  // namespace weir::openai
