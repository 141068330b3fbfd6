#include "engine/openai/harmony.h"

#include <cctype>
#include <utility>

namespace weir::openai {

using nlohmann::json;

namespace {

std::string_view unpadded(std::string_view s) {
  auto blank = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

HarmonyAnswer HarmonyStream::read(HarmonyText t) {
  HarmonyAnswer out{std::move(t.content), std::move(t.reasoning), {}};
  for (const HarmonyCall& c : t.calls) {
    const std::string_view body = unpadded(c.body);
    const json args = json::parse(body.begin(), body.end(), nullptr, false);
    const bool function = c.recipient.rfind("functions.", 0) == 0 && c.recipient.size() > 10;
    if (tools_ && function && !args.is_discarded() && args.is_object())
      calls_.push_back(ToolCall{new_call_id(), c.recipient.substr(10), std::string(body)});
    else
      out.content += c.text;  // no call we can return: the text as written
  }
  return out;
}

HarmonyAnswer HarmonyStream::push(std::string_view text) { return read(reader_.push(text)); }

HarmonyAnswer HarmonyStream::finish() {
  HarmonyAnswer out = read(reader_.finish());
  out.calls = std::exchange(calls_, {});
  return out;
}

HarmonyAnswer parse_harmony(std::string_view text, bool with_tools) {
  HarmonyStream s(with_tools);
  HarmonyAnswer a = s.push(text);
  HarmonyAnswer rest = s.finish();
  a.content += rest.content;
  a.reasoning += rest.reasoning;
  a.calls = std::move(rest.calls);
  return a;
}

json harmony_messages(const json& messages) {
  json out = messages;
  if (!out.is_array()) return out;
  for (json& m : out) {
    if (!m.is_object() || m.value("role", json()) != "assistant") continue;
    const bool calls = m.contains("tool_calls");
    const auto c = m.find("content");
    if (c != m.end() && c->is_null() && calls) m.erase("content");
    // Beside calls the template takes content or thinking, not both (it
    // renders the one as the call's analysis): content, when there is some.
    const bool has_content = m.contains("content") && !(m["content"].is_string() && m["content"].get_ref<const std::string&>().empty());
    const auto rc = m.find("reasoning_content");
    if (rc != m.end() && rc->is_string() && !m.contains("thinking") && !(calls && has_content)) m["thinking"] = *rc;
  }
  return out;
}

}  // namespace weir::openai
