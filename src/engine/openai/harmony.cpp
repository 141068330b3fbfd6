#include "engine/openai/harmony.h"

#include <algorithm>
#include <cctype>
#include <utility>

namespace weir::openai {

using nlohmann::json;

namespace {

constexpr std::string_view kStart = "<|start|>", kChannel = "<|channel|>", kMessage = "<|message|>";
// What ends a message's body. <|start|> opens the next message (a model that
// skips <|end|>): it is left for the next header, which reads past it.
constexpr std::string_view kEnds[] = {"<|end|>", "<|return|>", "<|call|>", "<|start|>"};

bool blank(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

std::string_view unpadded(std::string_view s) {
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

// The word after `key` in a header: up to white space, a marker or the end.
std::string_view word_after(std::string_view header, std::string_view key) {
  const size_t at = header.find(key);
  if (at == std::string_view::npos) return {};
  std::string_view rest = header.substr(at + key.size());
  size_t n = 0;
  while (n < rest.size() && !blank(rest[n]) && rest.substr(n, 2) != "<|") ++n;
  return rest.substr(0, n);
}

// Whether s and p agree on their common length (s may still become p).
bool agrees(std::string_view s, std::string_view p) {
  const size_t n = std::min(s.size(), p.size());
  return s.substr(0, n) == p.substr(0, n);
}

// The length of the longest end of `s` that begins `marker` (held back: the
// next text may finish it).
size_t marker_start_at_end(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

}  // namespace

bool is_harmony_template(std::string_view t) { return t.find(kChannel) != std::string_view::npos; }

void HarmonyStream::open_message(std::string_view header, std::string_view raw) {
  const std::string_view channel = word_after(header, kChannel);
  const std::string_view recipient = word_after(header, "to=");
  if (!recipient.empty()) {
    part_ = Part::Call;
    call_name_ = recipient.substr(0, 10) == "functions." ? std::string(recipient.substr(10)) : std::string();
    call_body_.clear();
    call_raw_ = std::string(raw);
  } else if (channel == "analysis") {
    part_ = Part::Reasoning;
  } else {
    part_ = Part::Content;  // final, commentary (a preamble to calls), or none given
  }
}

void HarmonyStream::close_message(HarmonyAnswer& out) {
  if (part_ == Part::Call) {
    const std::string_view body = unpadded(call_body_);
    const json args = json::parse(body.begin(), body.end(), nullptr, false);
    if (tools_ && !call_name_.empty() && !args.is_discarded() && args.is_object()) {
      calls_.push_back(ToolCall{new_call_id(), call_name_, std::string(body)});
    } else {
      out.content += call_raw_ + call_body_;  // no call we can return: the text as written
    }
  }
  part_ = Part::Header;
}

void HarmonyStream::step(HarmonyAnswer& out, bool at_end) {
  while (!held_.empty()) {
    if (part_ == Part::Header) {
      // A header opens with a marker or the recipient (" to=..." right after
      // the prompt's "<|start|>assistant"); anything else is plain text.
      const std::string_view h = held_;
      if (!agrees(h, "<|") && !agrees(h, " to=") && !agrees(h, "to=")) {
        part_ = Part::Content;
        continue;
      }
      const size_t m = held_.find(kMessage);
      if (m == std::string::npos) {
        if (!at_end) return;
        // A header the answer ended in (max_tokens): no text for anyone.
        held_.clear();
        return;
      }
      std::string_view header = std::string_view(held_).substr(0, m);
      if (header.substr(0, kStart.size()) == kStart) header.remove_prefix(kStart.size());
      const size_t after = m + kMessage.size();
      open_message(header, std::string_view(held_).substr(0, after));
      held_.erase(0, after);
      continue;
    }
    size_t end = std::string::npos, end_len = 0;
    for (std::string_view e : kEnds) {
      const size_t at = held_.find(e);
      if (at < end) end = at, end_len = e == kStart ? 0 : e.size();
    }
    size_t take = end;
    if (end == std::string::npos) {
      size_t keep = 0;
      if (!at_end)
        for (std::string_view e : kEnds) keep = std::max(keep, marker_start_at_end(held_, e));
      take = held_.size() - keep;
    }
    const std::string_view body = std::string_view(held_).substr(0, take);
    if (part_ == Part::Reasoning) out.reasoning.append(body);
    else if (part_ == Part::Content) out.content.append(body);
    else call_body_.append(body);
    if (end == std::string::npos) {
      held_.erase(0, take);
      if (at_end) close_message(out);
      return;
    }
    held_.erase(0, end + end_len);
    close_message(out);
  }
  if (at_end && part_ != Part::Header) close_message(out);
}

HarmonyAnswer HarmonyStream::push(std::string_view text) {
  HarmonyAnswer out;
  held_.append(text);
  step(out, false);
  return out;
}

HarmonyAnswer HarmonyStream::finish() {
  HarmonyAnswer out;
  step(out, true);
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
    const auto rc = m.find("reasoning_content");
    if (rc != m.end() && rc->is_string() && !m.contains("thinking")) m["thinking"] = *rc;
    const auto c = m.find("content");
    if (c != m.end() && c->is_null() && m.contains("tool_calls")) m.erase("content");
  }
  return out;
}

}  // namespace weir::openai
