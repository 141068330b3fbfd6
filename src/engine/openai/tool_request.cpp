#include "engine/openai/tool_request.h"

#include <cctype>
#include <set>
#include <string>

#include "engine/openai/forced_tool_calls.h"

namespace weir::openai {

using nlohmann::json;

namespace {

bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  return true;
}

// 'where' must be an object holding `key` of the given kind.
const json& need(const json& v, const std::string& where, const char* key, bool (json::*is)() const noexcept,
                 const char* what) {
  const auto it = v.find(key);
  const std::string at = where + "." + key;
  if (it == v.end() || it->is_null()) throw bad_request(at, "'" + at + "' is required");
  if (!((*it).*is)()) throw bad_request(at, "'" + at + "' must be " + what);
  return *it;
}

void check_tool(const json& t, const std::string& at, std::set<std::string>* names) {
  if (!t.is_object()) throw bad_request(at, "'" + at + "' must be an object");
  const json& type = need(t, at, "type", &json::is_string, "a string");
  if (type != "function")
    throw bad_request(at + ".type", "'" + at + ".type' must be \"function\" (the only tools weir takes), got " + type.dump());
  const json& f = need(t, at, "function", &json::is_object, "an object");
  const std::string fat = at + ".function";
  const std::string name = need(f, fat, "name", &json::is_string, "a string").get<std::string>();
  if (!valid_name(name))
    throw bad_request(fat + ".name", "'" + fat + ".name' must be 1 to 64 letters, digits, '_' or '-', got " + json(name).dump());
  if (!names->insert(name).second) throw bad_request(fat + ".name", "'" + fat + ".name': two tools are named " + name);
  if (f.contains("description") && !f["description"].is_string() && !f["description"].is_null())
    throw bad_request(fat + ".description", "'" + fat + ".description' must be a string");
  if (f.contains("parameters") && !f["parameters"].is_object() && !f["parameters"].is_null())
    throw bad_request(fat + ".parameters", "'" + fat + ".parameters' must be a JSON schema object");
  if (f.contains("strict") && !f["strict"].is_boolean() && !f["strict"].is_null())
    throw bad_request(fat + ".strict", "'" + fat + ".strict' must be a boolean");
}

}  // namespace

void read_tool_fields(const json& body, GenerationRequest& r) {
  std::set<std::string> names;
  if (const auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) throw bad_request("tools", "'tools' must be an array of tools");
    for (size_t i = 0; i < it->size(); ++i) check_tool((*it)[i], "tools[" + std::to_string(i) + "]", &names);
    if (!it->empty()) r.tools = *it;
  }
  if (const auto it = body.find("tool_choice"); it != body.end() && !it->is_null()) {
    const json& c = *it;
    if (c.is_string()) {
      if (c != "none" && c != "auto" && c != "required")
        throw bad_request("tool_choice", "'tool_choice' must be none, auto, required or a function, got " + c.dump());
      if (c == "required" && names.empty()) throw bad_request("tool_choice", "'tool_choice': required needs 'tools'");
    } else if (c.is_object()) {
      const json& type = need(c, "tool_choice", "type", &json::is_string, "a string");
      if (type != "function")
        throw bad_request("tool_choice.type", "'tool_choice.type' must be \"function\", got " + type.dump());
      const json& f = need(c, "tool_choice", "function", &json::is_object, "an object");
      const std::string name = need(f, "tool_choice.function", "name", &json::is_string, "a string").get<std::string>();
      if (!names.count(name))
        throw bad_request("tool_choice.function.name",
                          "'tool_choice.function.name' names " + json(name).dump() + ", which is not one of 'tools'");
    } else {
      throw bad_request("tool_choice", "'tool_choice' must be a string or an object");
    }
    r.tool_choice = c;
  }
  if (const auto it = body.find("parallel_tool_calls"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) throw bad_request("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    r.parallel_tool_calls = it->get<bool>();
  }
  const json schema = forced_call_schema(r.tools, r.tool_choice, r.parallel_tool_calls);
  if (!schema.is_null()) {
    if (r.format.kind != OutputFormat::Kind::Text)
      throw bad_request("tool_choice", "'tool_choice' forcing a call cannot be combined with 'response_format'");
    r.format = OutputFormat{OutputFormat::Kind::JsonSchema, schema.dump(), "tool_choice"};
  }
}

void check_tool_messages(const json& messages) {
  if (!messages.is_array()) return;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    if (!m.is_object()) continue;
    const std::string at = "messages[" + std::to_string(i) + "]";
    const std::string role = m.value("role", "");
    if (const auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
      if (role != "assistant") throw bad_request(at + ".tool_calls", "'" + at + ".tool_calls' belongs to assistant messages");
      if (!calls->is_array()) throw bad_request(at + ".tool_calls", "'" + at + ".tool_calls' must be an array");
      for (size_t k = 0; k < calls->size(); ++k) {
        const std::string cat = at + ".tool_calls[" + std::to_string(k) + "]";
        const json& c = (*calls)[k];
        if (!c.is_object()) throw bad_request(cat, "'" + cat + "' must be an object");
        if (c.contains("id") && !c["id"].is_string() && !c["id"].is_null())
          throw bad_request(cat + ".id", "'" + cat + ".id' must be a string");
        const json& f = need(c, cat, "function", &json::is_object, "an object");
        need(f, cat + ".function", "name", &json::is_string, "a string");
        const auto a = f.find("arguments");
        if (a != f.end() && !a->is_null() && !a->is_string() && !a->is_object())
          throw bad_request(cat + ".function.arguments", "'" + cat + ".function.arguments' must be a string of JSON");
      }
    }
    if (role == "tool") {
      const auto id = m.find("tool_call_id");
      if (id == m.end() || !id->is_string())
        throw bad_request(at + ".tool_call_id", "'" + at + ".tool_call_id' must be a string (the id of the call answered)");
    }
  }
}

json messages_for_template(const json& messages) {
  json out = messages;
  for (json& m : out) {
    if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    for (json& c : m["tool_calls"]) {
      if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
          !c["function"].contains("arguments"))
        continue;
      json& a = c["function"]["arguments"];
      if (!a.is_string()) continue;
      const std::string& s = a.get_ref<const std::string&>();
      json v = json::parse(s, nullptr, false);
      if (!v.is_discarded() && v.is_object()) a = std::move(v);
    }
  }
  return out;
}

}  // namespace weir::openai
