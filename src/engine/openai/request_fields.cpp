#include "engine/openai/request_fields.h"

#include "engine/openai/request.h"

namespace weir::openai {
namespace {

using nlohmann::json;

bool empty_array(const json& v) { return v.is_array() && v.empty(); }
bool is_false(const json& v) { return v.is_boolean() && !v.get<bool>(); }
bool text_only(const json& v) { return v == json::array({"text"}); }
bool no_function_call(const json& v) { return v == "none" || v == "auto"; }
bool default_tier(const json& v) { return v == "auto" || v == "default"; }

constexpr const char* kNotYet = "is not supported yet";

const std::vector<FieldRule> kCommon = {
    {"model", FieldUse::Taken},
    {"temperature", FieldUse::Taken},
    {"top_p", FieldUse::Taken},
    {"top_k", FieldUse::Taken},      // extension (llama-server, vLLM)
    {"min_p", FieldUse::Taken},      // extension
    {"ignore_eos", FieldUse::Taken},  // extension
    {"presence_penalty", FieldUse::Taken},
    {"frequency_penalty", FieldUse::Taken},
    {"seed", FieldUse::Taken},
    {"n", FieldUse::Taken},  // choices per prompt, each its own generation
    {"stream", FieldUse::Taken},
    {"stream_options", FieldUse::Taken},
    {"stop", FieldUse::Taken},
    {"max_tokens", FieldUse::Taken},
    {"logprobs", FieldUse::Taken},
    {"user", FieldUse::Label},
    {"logit_bias", FieldUse::Taken},
    {"grammar", FieldUse::Taken},      // extension (llama-server): GBNF
    {"json_schema", FieldUse::Taken},  // extension (llama-server)
};

std::vector<FieldRule> chat_rules() {
  std::vector<FieldRule> r = kCommon;
  const std::vector<FieldRule> more = {
      {"messages", FieldUse::Taken},
      {"max_completion_tokens", FieldUse::Taken},
      {"top_logprobs", FieldUse::Taken},
      {"metadata", FieldUse::Label},
      {"safety_identifier", FieldUse::Label},
      {"prompt_cache_key", FieldUse::Label},  // prompts that begin alike share cache cells anyway
      {"store", FieldUse::DefaultOnly, is_false, "is not supported: weir stores no answers"},
      {"service_tier", FieldUse::DefaultOnly, default_tier, "takes auto or default here"},
      {"modalities", FieldUse::DefaultOnly, text_only, "takes [\"text\"] only"},
      {"response_format", FieldUse::Taken},
      {"tools", FieldUse::Taken},  // tool_request.cpp checks them
      {"tool_choice", FieldUse::Taken},
      {"parallel_tool_calls", FieldUse::Taken},
      {"functions", FieldUse::DefaultOnly, empty_array, "is not supported (the legacy form): send 'tools'"},
      {"function_call", FieldUse::DefaultOnly, no_function_call, "is not supported (the legacy form): send 'tool_choice'"},
      {"audio", FieldUse::Refused, nullptr, "is not supported: text only"},
      {"prediction", FieldUse::Refused, nullptr, kNotYet},
      {"reasoning_effort", FieldUse::Taken},  // request.cpp: for the chat template
      {"verbosity", FieldUse::Refused, nullptr, kNotYet},
      {"web_search_options", FieldUse::Refused, nullptr, "is not supported: no web search"},
  };
  r.insert(r.end(), more.begin(), more.end());
  return r;
}

std::vector<FieldRule> completion_rules() {
  std::vector<FieldRule> r = kCommon;
  const std::vector<FieldRule> more = {
      {"prompt", FieldUse::Taken},
      {"echo", FieldUse::Taken},     // not with logprobs (request.cpp refuses it)
      {"best_of", FieldUse::Taken},  // not with stream
      {"suffix", FieldUse::Taken},   // models with fill-in-the-middle tokens (answer.cpp refuses it elsewhere)
  };
  r.insert(r.end(), more.begin(), more.end());
  return r;
}

// /v1/embeddings (engine/openai/embeddings.cpp reads them).
const std::vector<FieldRule> kEmbeddings = {
    {"input", FieldUse::Taken},
    {"model", FieldUse::Taken},
    {"encoding_format", FieldUse::Taken},  // float or base64
    {"dimensions", FieldUse::Taken},       // the model's size only (embeddings.cpp refuses others)
    {"normalize", FieldUse::Taken},        // extension: false returns the pooled vector as it is
    {"user", FieldUse::Label},
};

// A field's name for a message: whole up to 200 bytes, else its first 200
// cut at a character's start (the message stays UTF-8) and "...".
std::string shortened(const std::string& key) {
  if (key.size() <= 200) return key;
  size_t n = 200;
  while (n > 0 && (static_cast<unsigned char>(key[n]) & 0xC0) == 0x80) --n;
  return key.substr(0, n) + "...";
}

const char* endpoint_path(Endpoint e) {
  switch (e) {
    case Endpoint::Chat: return "/v1/chat/completions";
    case Endpoint::Completions: return "/v1/completions";
    case Endpoint::Embeddings: return "/v1/embeddings";
  }
  return "";
}

}  // namespace

const std::vector<FieldRule>& field_rules(Endpoint e) {
  static const std::vector<FieldRule> chat = chat_rules(), completions = completion_rules();
  switch (e) {
    case Endpoint::Chat: return chat;
    case Endpoint::Completions: return completions;
    case Endpoint::Embeddings: return kEmbeddings;
  }
  return completions;
}

std::vector<std::string> check_fields(const json& body, Endpoint e, bool accept_unknown) {
  std::vector<std::string> unknown;
  if (!body.is_object()) return unknown;  // request.cpp says what it must be
  const std::vector<FieldRule>& rules = field_rules(e);
  for (const auto& [key, v] : body.items()) {
    const std::string name = shortened(key);
    const FieldRule* rule = nullptr;
    for (const FieldRule& r : rules)
      if (key == r.name) rule = &r;
    if (!rule) {
      if (!accept_unknown)
        throw bad_request(name, "'" + name + "' is not a field of " + endpoint_path(e) +
                                    " (weir serve --accept-unknown-fields takes such fields and logs them)");
      unknown.push_back(name);
      continue;
    }
    if (v.is_null()) continue;
    if (rule->use == FieldUse::Refused || (rule->use == FieldUse::DefaultOnly && !rule->is_default(v)))
      throw bad_request(name, "'" + name + "' " + rule->why);
  }
  return unknown;
}

}  // namespace weir::openai
