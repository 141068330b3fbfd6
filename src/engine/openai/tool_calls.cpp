#include "engine/openai/tool_calls.h"

#include <atomic>
#include <cctype>
#include <random>

namespace weir::openai {

using nlohmann::json;

namespace {

constexpr std::string_view kHermesOpen = "<tool_call>", kHermesClose = "</tool_call>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// The length of the JSON object or array that s begins with ('{' or '['),
// brackets counted outside strings; npos when it does not close.
size_t json_value_length(std::string_view s) {
  if (s.empty() || (s[0] != '{' && s[0] != '[')) return std::string_view::npos;
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

json parse_or_discarded(std::string_view s) { return json::parse(s.begin(), s.end(), nullptr, false); }

// The calls a JSON value holds: one call object, an array of them, or
// {"tool_calls": [...]}. False (and nothing added) if any is not a call.
bool calls_from_value(const json& v, std::vector<ToolCall>* out) {
  std::vector<ToolCall> calls;
  const json* list = &v;
  if (v.is_object() && v.contains("tool_calls") && v.size() == 1) list = &v["tool_calls"];
  if (list->is_array()) {
    if (list->empty()) return false;
    for (const json& c : *list) {
      ToolCall t;
      if (!call_from_json(c, &t)) return false;
      calls.push_back(std::move(t));
    }
  } else {
    ToolCall t;
    if (!call_from_json(*list, &t)) return false;
    calls.push_back(std::move(t));
  }
  out->insert(out->end(), calls.begin(), calls.end());
  return true;
}

// The generic form: the whole text one JSON value of calls, in ``` fences or not.
bool parse_whole_json(std::string_view text, std::vector<ToolCall>* out) {
  std::string_view t = trimmed(text);
  if (t.size() > 6 && t.substr(0, 3) == "```" && t.substr(t.size() - 3) == "```") {
    t.remove_suffix(3);
    t.remove_prefix(3);
    if (t.substr(0, 4) == "json") t.remove_prefix(4);
    t = trimmed(t);
  }
  if (t.empty() || (t[0] != '{' && t[0] != '[') || json_value_length(t) != t.size()) return false;
  const json v = parse_or_discarded(t);
  return !v.is_discarded() && calls_from_value(v, out);
}

// Hermes: <tool_call> blocks; a block whose JSON does not parse stays in
// the content. The last block may lack its closing tag (the answer ended).
ParsedAnswer parse_hermes(std::string_view text) {
  ParsedAnswer p;
  size_t at = 0;
  while (at < text.size()) {
    const size_t open = text.find(kHermesOpen, at);
    if (open == std::string_view::npos) break;
    const size_t body = open + kHermesOpen.size();
    const size_t close = text.find(kHermesClose, body);
    const size_t end = close == std::string_view::npos ? text.size() : close + kHermesClose.size();
    const std::string_view inside = trimmed(text.substr(body, (close == std::string_view::npos ? text.size() : close) - body));
    const json v = json_value_length(inside) == inside.size() ? parse_or_discarded(inside) : json(json::value_t::discarded);
    p.content.append(text.substr(at, open - at));
    if (v.is_discarded() || !calls_from_value(v, &p.calls)) p.content.append(text.substr(open, end - open));
    at = end;
  }
  p.content.append(text.substr(std::min(at, text.size())));
  return p;
}

// Llama 3: from <|python_tag|> (text before it is content) or from the
// answer's start, JSON call objects separated by ';' or white space, and
// nothing else.
ParsedAnswer parse_llama3(std::string_view text) {
  ParsedAnswer p;
  const size_t tag = text.find(kPythonTag);
  std::string_view rest = tag == std::string_view::npos ? text : text.substr(tag + kPythonTag.size());
  std::vector<ToolCall> calls;
  bool ok = true;
  for (;;) {
    while (!rest.empty() && (space(rest.front()) || rest.front() == ';')) rest.remove_prefix(1);
    if (rest.empty()) break;
    const size_t n = json_value_length(rest);
    const json v = n == std::string_view::npos ? json(json::value_t::discarded) : parse_or_discarded(rest.substr(0, n));
    if (v.is_discarded() || !calls_from_value(v, &calls)) {
      ok = false;
      break;
    }
    rest.remove_prefix(n);
  }
  if (!ok || calls.empty()) return ParsedAnswer{std::string(text), {}};
  p.content = std::string(text.substr(0, tag == std::string_view::npos ? 0 : tag));
  p.calls = std::move(calls);
  return p;
}

// Mistral: [TOOL_CALLS] then a JSON array of calls (or one call); text
// before the marker is content, anything after the array too.
ParsedAnswer parse_mistral(std::string_view text) {
  const size_t m = text.find(kMistralMarker);
  if (m == std::string_view::npos) return ParsedAnswer{std::string(text), {}};
  std::string_view rest = text.substr(m + kMistralMarker.size());
  while (!rest.empty() && space(rest.front())) rest.remove_prefix(1);
  const size_t n = json_value_length(rest);
  ParsedAnswer p;
  const json v = n == std::string_view::npos ? json(json::value_t::discarded) : parse_or_discarded(rest.substr(0, n));
  if (v.is_discarded() || !calls_from_value(v, &p.calls)) return ParsedAnswer{std::string(text), {}};
  p.content = std::string(text.substr(0, m)) + std::string(rest.substr(n));
  return p;
}

}  // namespace

ToolSyntax tool_syntax_of(std::string_view t) {
  if (t.find(kMistralMarker) != std::string_view::npos) return ToolSyntax::Mistral;
  if (t.find(kHermesOpen) != std::string_view::npos) return ToolSyntax::Hermes;
  if (t.find(kPythonTag) != std::string_view::npos || t.find("Environment: ipython") != std::string_view::npos ||
      t.find("\"parameters\": dictionary") != std::string_view::npos)
    return ToolSyntax::Llama3;
  return ToolSyntax::Json;
}

const char* tool_syntax_name(ToolSyntax s) {
  switch (s) {
    case ToolSyntax::Hermes: return "hermes";
    case ToolSyntax::Llama3: return "llama3";
    case ToolSyntax::Mistral: return "mistral";
    case ToolSyntax::Json: return "json";
  }
  return "json";
}

std::string new_call_id() {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id.push_back(kAlnum[rng() % (sizeof kAlnum - 1)]);
  return id;
}

bool call_from_json(const json& v, ToolCall* out) {
  if (!v.is_object()) return false;
  const json* f = &v;
  if (v.contains("function") && v["function"].is_object()) f = &v["function"];
  const auto name = f->find("name");
  if (name == f->end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return false;
  auto args = f->find("arguments");
  if (args == f->end()) args = f->find("parameters");
  std::string arguments = "{}";
  if (args != f->end()) {
    if (args->is_object()) {
      arguments = args->dump(-1, ' ', false, json::error_handler_t::replace);
    } else if (args->is_string()) {  // the arguments as JSON text, as OpenAI sends them
      const json inner = parse_or_discarded(args->get_ref<const std::string&>());
      if (inner.is_discarded() || !inner.is_object()) return false;
      arguments = args->get<std::string>();
    } else if (!args->is_null()) {
      return false;
    }
  }
  out->id = new_call_id();
  out->name = name->get<std::string>();
  out->arguments = std::move(arguments);
  return true;
}

ParsedAnswer parse_tool_calls(std::string_view text, ToolSyntax s) {
  ParsedAnswer p;
  switch (s) {
    case ToolSyntax::Hermes: p = parse_hermes(text); break;
    case ToolSyntax::Llama3: p = parse_llama3(text); break;
    case ToolSyntax::Mistral: p = parse_mistral(text); break;
    case ToolSyntax::Json: p.content = std::string(text); break;
  }
  if (p.calls.empty()) {
    std::vector<ToolCall> calls;
    if (parse_whole_json(text, &calls)) return ParsedAnswer{"", std::move(calls)};
  }
  return p;
}

}  // namespace weir::openai
