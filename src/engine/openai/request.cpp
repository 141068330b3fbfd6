#include "engine/openai/request.h"

#include "engine/openai/json_body.h"
#include "engine/openai/output_format.h"
#include "engine/openai/request_fields.h"
#include "engine/openai/tool_request.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

namespace weir::openai {

using nlohmann::json;

ApiError bad_request(const std::string& param, const std::string& message) {
  return ApiError(400, "invalid_request_error", param, message);
}

const char* error_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 503: return "server_overloaded";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

json error_json(const ApiError& e) {
  json err = {{"message", e.what()}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  return json{{"error", err}};
}

namespace {

[[noreturn]] void wrong_type(const std::string& name, const json& v, const char* want) {
  throw bad_request(name, "'" + name + "' must be " + want + ", got " + json_kind(v));
}

void read_number(const json& body, const char* name, float lo, float hi, float* out) {
  const json* v = given_field(body, name);
  if (!v) return;
  if (!v->is_number()) wrong_type(name, *v, "a number");
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi)
    throw bad_request(name, "'" + std::string(name) + "' must be between " + json(lo).dump() + " and " + json(hi).dump() +
                                ", got " + v->dump());
  *out = float(d);
}

void read_int(const json& body, const char* name, int64_t lo, int64_t hi, int* out) {
  const json* v = given_field(body, name);
  if (!v) return;
  if (!v->is_number_integer()) wrong_type(name, *v, "an integer");
  const bool too_big = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX);
  const int64_t n = too_big ? INT64_MAX : v->get<int64_t>();
  if (too_big || n < lo || n > hi)
    throw bad_request(name, "'" + std::string(name) + "' must be between " + std::to_string(lo) + " and " +
                                std::to_string(hi) + ", got " + v->dump());
  *out = int(n);
}

void read_bool(const json& body, const char* name, bool* out) {
  const json* v = given_field(body, name);
  if (!v) return;
  if (!v->is_boolean()) wrong_type(name, *v, "a boolean");
  *out = v->get<bool>();
}

// The fields both endpoints share.
GenerationRequest read_common(const json& body) {
  if (!body.is_object()) throw bad_request("", "the request body must be a JSON object, got " + std::string(json_kind(body)));
  GenerationRequest r;
  if (const json* v = given_field(body, "model")) {
    if (!v->is_string()) wrong_type("model", *v, "a string");
    r.model = v->get<std::string>();
  }
  read_number(body, "temperature", 0.0f, 2.0f, &r.temperature);
  read_number(body, "top_p", 0.0f, 1.0f, &r.top_p);
  read_number(body, "min_p", 0.0f, 1.0f, &r.min_p);
  read_int(body, "top_k", 0, 1 << 30, &r.top_k);
  read_number(body, "presence_penalty", -2.0f, 2.0f, &r.presence_penalty);
  read_number(body, "frequency_penalty", -2.0f, 2.0f, &r.frequency_penalty);
  if (const json* v = given_field(body, "seed")) {
    if (!v->is_number_integer()) wrong_type("seed", *v, "an integer");
    r.seed = v->is_number_unsigned() ? v->get<uint64_t>() : uint64_t(v->get<int64_t>());
  }
  read_int(body, "n", 1, kMaxChoices, &r.n);
  r.best_of = r.n;
  read_bool(body, "stream", &r.stream);
  read_bool(body, "ignore_eos", &r.ignore_eos);
  if (const json* v = given_field(body, "stream_options")) {
    if (!v->is_object()) wrong_type("stream_options", *v, "an object");
    if (!r.stream) throw bad_request("stream_options", "'stream_options' is only allowed with 'stream': true");
    read_bool(*v, "include_usage", &r.include_usage);
  }
  if (const json* v = given_field(body, "stop")) {
    if (v->is_string()) {
      r.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      if (v->size() > 4) throw bad_request("stop", "'stop' takes up to 4 strings, got " + std::to_string(v->size()));
      for (const json& s : *v) {
        if (!s.is_string()) wrong_type("stop", s, "a string or an array of strings");
        r.stop.push_back(s.get<std::string>());
      }
    } else {
      wrong_type("stop", *v, "a string or an array of strings");
    }
  }
  read_output_format(body, r);
  return r;
}

// A non-empty array of integers: a prompt as token ids.
bool token_list(const json& v) {
  return v.is_array() && !v.empty() && std::all_of(v.begin(), v.end(), [](const json& t) { return t.is_number_integer(); });
}

std::vector<int32_t> read_tokens(const json& v) {
  std::vector<int32_t> ids;
  for (const json& t : v) ids.push_back(token_id(t, 0, "prompt"));
  return ids;
}

// The completion's prompts: a text, token ids, or a list of texts or of
// token id lists (each prompt its own choices), as OpenAI takes them.
std::vector<CompletionPrompt> read_prompts(const json& body) {
  const json* p = given_field(body, "prompt");
  if (!p) throw bad_request("prompt", "'prompt' is required");
  const char* want = "a string, an array of token ids, or an array of strings or of token id arrays";
  std::vector<CompletionPrompt> out;
  if (p->is_string()) {
    out.push_back({p->get<std::string>(), {}});
  } else if (token_list(*p)) {
    out.push_back({"", read_tokens(*p)});
  } else if (p->is_array() && !p->empty() && (*p)[0].is_string()) {
    for (const json& e : *p) {
      if (!e.is_string()) wrong_type("prompt", e, "a list of strings throughout");
      out.push_back({e.get<std::string>(), {}});
    }
  } else if (p->is_array() && !p->empty() && (*p)[0].is_array()) {
    for (const json& e : *p) {
      if (!token_list(e)) throw bad_request("prompt", "'prompt' as a list of token id arrays must hold non-empty arrays of integers throughout");
      out.push_back({"", read_tokens(e)});
    }
  } else {
    wrong_type("prompt", *p, want);
  }
  return out;
}

}  // namespace

int32_t token_id(const json& v, int64_t n_vocab, const std::string& field) {
  const int64_t hi = n_vocab > 0 ? n_vocab - 1 : INT32_MAX;
  const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(hi)
                                               : v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= hi;
  if (!in_range)
    throw bad_request(field, "'" + field + "' holds " + v.dump(-1, ' ', false, json::error_handler_t::replace) +
                                 ", not a token id (0 to " + std::to_string(hi) + ")");
  return int32_t(v.get<int64_t>());
}

GenerationRequest parse_chat_request(const json& body, bool accept_unknown) {
  std::vector<std::string> unknown = check_fields(body, Endpoint::Chat, accept_unknown);
  GenerationRequest r = read_common(body);
  r.unknown_fields = std::move(unknown);
  r.chat = true;
  const json* m = given_field(body, "messages");
  if (!m) throw bad_request("messages", "'messages' is required");
  if (!m->is_array()) wrong_type("messages", *m, "an array");
  if (m->empty()) throw bad_request("messages", "'messages' must hold at least one message");
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) wrong_type(at, msg, "an object");
    const json* role = given_field(msg, "role");
    if (!role || !role->is_string()) throw bad_request(at + ".role", "'" + at + ".role' must be a string");
    const std::string rl = role->get<std::string>();
    if (rl != "system" && rl != "developer" && rl != "user" && rl != "assistant" && rl != "tool")
      throw bad_request(at + ".role", "'" + at + ".role' must be system, developer, user, assistant or tool, got '" + rl + "'");
    if (const json* c = given_field(msg, "content"); c && !c->is_string() && !c->is_array())
      wrong_type(at + ".content", *c, "a string or an array of content parts");
  }
  check_tool_messages(*m);
  r.messages = *m;
  int max_tokens = -1;
  read_int(body, "max_tokens", 1, 1 << 30, &max_tokens);
  read_int(body, "max_completion_tokens", 1, 1 << 30, &max_tokens);
  r.max_tokens = max_tokens;
  read_bool(body, "logprobs", &r.logprobs);
  read_int(body, "top_logprobs", 0, 20, &r.top_logprobs);
  if (r.top_logprobs > 0 && !r.logprobs)
    throw bad_request("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  read_tool_fields(body, r);
  // The template's variable of that name (gpt-oss's writes "Reasoning: low"
  // into its system message); templates that read none ignore it.
  if (const json* v = given_field(body, "reasoning_effort")) {
    if (!v->is_string()) wrong_type("reasoning_effort", *v, "a string");
    const std::string e = v->get<std::string>();
    if (e != "low" && e != "medium" && e != "high")
      throw bad_request("reasoning_effort", "'reasoning_effort' takes low, medium or high, got '" + e + "'");
    r.reasoning_effort = e;
  }
  return r;
}

GenerationRequest parse_completion_request(const json& body, bool accept_unknown) {
  std::vector<std::string> unknown = check_fields(body, Endpoint::Completions, accept_unknown);
  GenerationRequest r = read_common(body);
  r.unknown_fields = std::move(unknown);
  r.prompts = read_prompts(body);
  read_int(body, "max_tokens", 1, 1 << 30, &r.max_tokens);
  if (r.max_tokens < 0) r.max_tokens = 16;  // OpenAI's default for completions
  int lp = 0;
  read_int(body, "logprobs", 0, 20, &lp);
  r.logprobs = given_field(body, "logprobs") != nullptr;
  r.top_logprobs = lp;
  read_bool(body, "echo", &r.echo);
  if (r.echo && r.logprobs)
    throw bad_request("echo", "'echo' with 'logprobs' is not supported: weir computes no log-probabilities of the prompt's tokens");
  if (given_field(body, "best_of")) {
    read_int(body, "best_of", 1, kMaxChoices, &r.best_of);
    if (r.best_of < r.n)
      throw bad_request("best_of", "'best_of' must be at least 'n' (" + std::to_string(r.n) + "), got " + std::to_string(r.best_of));
    if (r.best_of > 1 && r.stream)
      throw bad_request("best_of", "'best_of' cannot be used with 'stream': the best choices are known only at the end");
  }
  if (const json* v = given_field(body, "suffix")) {
    if (!v->is_string()) wrong_type("suffix", *v, "a string");
    r.suffix = v->get<std::string>();
  }
  if (r.prompts.size() * size_t(r.best_of) > size_t(kMaxChoices))
    throw bad_request("prompt", "a request makes at most " + std::to_string(kMaxChoices) + " choices; " +
                                    std::to_string(r.prompts.size()) + " prompts of " + std::to_string(r.best_of) +
                                    " each would be " + std::to_string(r.prompts.size() * size_t(r.best_of)));
  return r;
}

}  // namespace weir::openai
