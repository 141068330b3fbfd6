#include "engine/openai/response.h"

#include <chrono>

namespace weir::openai {

using nlohmann::json;

int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {

json head(const ResponseHead& h, const char* object) {
  return json{{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

json finish(const std::string& reason) { return reason.empty() ? json(nullptr) : json(reason); }

// The bytes of a token's text as integers (OpenAI's "bytes": tokens may be
// parts of characters).
json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

// Text that JSON can carry: a token that is part of a UTF-8 character is
// sent with U+FFFD in its place (its "bytes" keep the truth).
std::string printable(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 2;
    if (ok) {
      out.append(s, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

json chat_logprobs(const std::vector<TokenLogprob>& lp) {
  json content = json::array();
  for (const TokenLogprob& t : lp) {
    json top = json::array();
    for (const auto& [tok, p] : t.top) top.push_back({{"token", printable(tok)}, {"logprob", p}, {"bytes", bytes_of(tok)}});
    content.push_back({{"token", printable(t.token)}, {"logprob", t.logprob}, {"bytes", bytes_of(t.token)}, {"top_logprobs", top}});
  }
  return json{{"content", content}, {"refusal", nullptr}};
}

// The legacy completions shape: parallel arrays.
json text_logprobs(const std::vector<TokenLogprob>& lp, size_t offset0) {
  json tokens = json::array(), logprobs = json::array(), top = json::array(), offsets = json::array();
  size_t at = offset0;
  for (const TokenLogprob& t : lp) {
    tokens.push_back(printable(t.token));
    logprobs.push_back(t.logprob);
    json m = json::object();
    for (const auto& [tok, p] : t.top) m[printable(tok)] = p;
    top.push_back(m);
    offsets.push_back(at);
    at += t.token.size();
  }
  return json{{"tokens", tokens}, {"token_logprobs", logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

}  // namespace

json usage_json(const Usage& u) {
  return json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json chat_choice(size_t index, const std::string& text, const std::string& finish_reason,
                 const std::vector<TokenLogprob>* logprobs, const std::vector<ToolCall>* calls,
                 const std::string* reasoning) {
  json message = {{"role", "assistant"}, {"content", text}, {"refusal", nullptr}};
  if (reasoning && !reasoning->empty()) message["reasoning_content"] = *reasoning;
  if (calls && !calls->empty()) {
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) message["content"] = nullptr;
    json list = json::array();
    for (const ToolCall& c : *calls)
      list.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    message["tool_calls"] = list;
  }
  return json{{"index", index},
              {"message", message},
              {"logprobs", logprobs ? chat_logprobs(*logprobs) : json(nullptr)},
              {"finish_reason", finish(finish_reason)}};
}

json text_choice(size_t index, const std::string& text, const std::string& finish_reason,
                 const std::vector<TokenLogprob>* logprobs) {
  return json{{"index", index},
              {"text", text},
              {"logprobs", logprobs ? text_logprobs(*logprobs, 0) : json(nullptr)},
              {"finish_reason", finish(finish_reason)}};
}

json chat_completion(const ResponseHead& h, json choices, const Usage& u) {
  json j = head(h, "chat.completion");
  j["choices"] = std::move(choices);
  j["usage"] = usage_json(u);
  return j;
}

json text_completion(const ResponseHead& h, json choices, const Usage& u) {
  json j = head(h, "text_completion");
  j["choices"] = std::move(choices);
  j["usage"] = usage_json(u);
  return j;
}

json chat_chunk(const ResponseHead& h, size_t choice, const std::string* role, const std::string& text,
                const std::string& finish_reason, const std::vector<TokenLogprob>* logprobs) {
  json j = head(h, "chat.completion.chunk");
  json delta = json::object();
  if (role) delta["role"] = *role;
  if (!text.empty() || (role && finish_reason.empty())) delta["content"] = text;
  j["choices"] = json::array({{{"index", choice},
                               {"delta", delta},
                               {"logprobs", logprobs ? chat_logprobs(*logprobs) : json(nullptr)},
                               {"finish_reason", finish(finish_reason)}}});
  return j;
}

json reasoning_chunk(const ResponseHead& h, size_t choice, const std::string& text,
                     const std::vector<TokenLogprob>* logprobs) {
  json j = head(h, "chat.completion.chunk");
  j["choices"] = json::array({{{"index", choice},
                               {"delta", {{"reasoning_content", text}}},
                               {"logprobs", logprobs ? chat_logprobs(*logprobs) : json(nullptr)},
                               {"finish_reason", nullptr}}});
  return j;
}

json text_chunk(const ResponseHead& h, size_t choice, const std::string& text, const std::string& finish_reason,
                const std::vector<TokenLogprob>* logprobs) {
  json j = head(h, "text_completion");
  j["choices"] = json::array({text_choice(choice, text, finish_reason, logprobs)});
  return j;
}

std::vector<json> tool_call_chunks(const ResponseHead& h, size_t choice, size_t index, const ToolCall& call) {
  std::vector<json> out;
  const json opened = {{"index", index},
                       {"id", call.id},
                       {"type", "function"},
                       {"function", {{"name", call.name}, {"arguments", ""}}}};
  const json arguments = {{"index", index}, {"function", {{"arguments", call.arguments}}}};
  for (const json& d : {opened, arguments}) {
    json j = head(h, "chat.completion.chunk");
    j["choices"] = json::array({{{"index", choice}, {"delta", {{"tool_calls", json::array({d})}}}, {"logprobs", nullptr},
                                 {"finish_reason", nullptr}}});
    out.push_back(std::move(j));
  }
  return out;
}

json usage_chunk(const ResponseHead& h, bool chat, const Usage& u) {
  json j = head(h, chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = json::array();
  j["usage"] = usage_json(u);
  return j;
}

std::string sse_event(const json& j) {
  return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}
std::string sse_done() { return "data: [DONE]\n\n"; }

}  // namespace weir::openai
