#include "text/harmony.h"

#include <algorithm>
#include <cctype>
#include <iterator>

namespace weir {

namespace {

constexpr std::string_view kStart = "<|start|>", kChannel = "<|channel|>", kMessage = "<|message|>";
// What ends a message's body. <|start|> opens the next message (a model that
// skips <|end|>): it is left for the next header, which reads past it.
constexpr std::string_view kEnds[] = {"<|end|>", "<|return|>", "<|call|>", "<|start|>"};
// What a header may begin with.
constexpr std::string_view kOpeners[] = {kStart, kChannel, kMessage, "<|constrain|>", " to=", "to="};

bool blank(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

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

void HarmonyReader::close_message(HarmonyText& out) {
  if (part_ == Part::Call) out.calls.push_back(std::move(call_));
  call_ = HarmonyCall();
  part_ = Part::Header;
}

void HarmonyReader::step(HarmonyText& out, bool at_end) {
  while (!held_.empty()) {
    if (part_ == Part::Header) {
      // A header opens with a marker of the format or the recipient
      // (" to=..." right after the prompt's "<|start|>assistant"); anything
      // else is plain text.
      const std::string_view h = held_;
      if (std::none_of(std::begin(kOpeners), std::end(kOpeners), [&](std::string_view o) { return agrees(h, o); })) {
        part_ = Part::Content;
        continue;
      }
      const size_t m = held_.find(kMessage);
      if (m == std::string::npos) {
        if (at_end) held_.clear();  // a header the answer ended in: no text for anyone
        return;
      }
      std::string_view header = h.substr(0, m);
      if (header.substr(0, kStart.size()) == kStart) header.remove_prefix(kStart.size());
      const size_t after = m + kMessage.size();
      const std::string_view recipient = word_after(header, "to=");
      if (!recipient.empty()) {
        part_ = Part::Call;
        call_.recipient = std::string(recipient);
        call_.text = std::string(h.substr(0, after));
      } else if (word_after(header, kChannel) == "analysis") {
        part_ = Part::Reasoning;
        if (reasoned_) out.reasoning += "\n";
        reasoned_ = true;
      } else {
        part_ = Part::Content;  // final, commentary (a preamble to calls), or none given
      }
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
    if (part_ == Part::Reasoning) {
      out.reasoning.append(body);
    } else if (part_ == Part::Content) {
      out.content.append(body);
    } else {
      call_.body.append(body);
      call_.text.append(body);
    }
    if (end == std::string::npos) {
      held_.erase(0, take);
      break;
    }
    held_.erase(0, end + end_len);
    close_message(out);
  }
  if (at_end && part_ != Part::Header) close_message(out);
}

HarmonyText HarmonyReader::push(std::string_view text) {
  HarmonyText out;
  held_.append(text);
  step(out, false);
  return out;
}

HarmonyText HarmonyReader::finish() {
  HarmonyText out;
  step(out, true);
  return out;
}

}  // namespace weir
