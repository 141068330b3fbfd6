// libFuzzer target for what a client's bytes reach in weir serve before the
// model: the request body (JSON, then the chat or completion request's
// fields), the messages through a chat template, and token ids through the
// detokenizer's checks. The first byte picks the path (its value % 5; from
// 128 on, the request parsers take unknown fields, as weir serve
// --accept-unknown-fields does, so the fields after one are reached too):
//   0: a chat request body;  1: a completion request body;
//   2: a chat template and messages ("<template>\0<messages json>"), rendered;
//   3: a request body whose messages go through the built-in Gemma 3,
//      ChatML and Llama 3 templates;
//   4: deep nesting, compactly: the next 3 bytes are a depth (to 1 M),
//      the byte after them picks '[' or '{"a":', the rest goes inside,
//      as a chat request's "messages".
// Bodies go through parse_json_body, as the server's do (nesting limit,
// UTF-8 checked).
// Only weir::Error (and the API's 400s, which are Errors) may escape;
// anything else (another exception, a crash, a sanitizer report) is a bug.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "engine/openai/json_body.h"
#include "engine/openai/request.h"
#include "text/chat_template.h"
#include "text/jinja/template.h"

namespace {

volatile size_t g_sink;

std::string render(const weir::jinja::Template& t, const nlohmann::json& messages) {
  nlohmann::json ctx = {{"messages", messages}, {"add_generation_prompt", true}, {"bos_token", "<bos>"}};
  return t.render(weir::jinja::value_from_json(ctx.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
}

// Path 4's body: `depth` levels of arrays or objects around `inner`.
std::string nested(const uint8_t* data, size_t size) {
  if (size < 4) return "{}";
  const size_t depth = (size_t(data[0]) << 16 | size_t(data[1]) << 8 | data[2]) % (size_t(1) << 20);
  const bool objects = data[3] & 1;
  std::string body = "{\"messages\": ";
  body.reserve(depth * 6 + size + 16);
  for (size_t i = 0; i < depth; ++i) body += objects ? "{\"a\":" : "[";
  body.append(reinterpret_cast<const char*>(data) + 4, size - 4);
  for (size_t i = 0; i < depth; ++i) body += objects ? '}' : ']';
  return body + "}";
}

void run(const uint8_t* data, size_t size) {
  const int path = data[0] % 5;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (path == 2) {
    const size_t cut = rest.find('\0');
    const std::string source = rest.substr(0, cut);
    const std::string messages = cut == std::string::npos ? "[]" : rest.substr(cut + 1);
    weir::jinja::Template t(source);
    g_sink = g_sink + t.render(weir::jinja::value_from_json("{\"messages\": " + messages +
                                                            ", \"add_generation_prompt\": true}"))
                          .size();
    return;
  }
  // Refusals are ApiErrors (weir::Errors), and their JSON must dump: a
  // message that is not UTF-8 would throw here.
  nlohmann::json body;
  try {
    body = weir::openai::parse_json_body(path == 4 ? nested(data + 1, size - 1) : rest);
  } catch (const weir::openai::ApiError& e) {
    g_sink = g_sink + weir::openai::error_json(e).dump().size();
    return;
  }
  const bool accept_unknown = data[0] >= 128;
  if (path == 1) {
    const weir::openai::GenerationRequest r = weir::openai::parse_completion_request(body, accept_unknown);
    g_sink = g_sink + r.prompts.size() + size_t(r.best_of) + r.suffix.size() + r.stop.size();
    return;
  }
  const weir::openai::GenerationRequest r = weir::openai::parse_chat_request(body, accept_unknown);
  g_sink = g_sink + r.messages.size() + r.stop.size();
  if (path == 3) {
    static const weir::jinja::Template gemma(weir::builtin_chat_template("gemma")),
        chatml(weir::builtin_chat_template("chatml")), llama3(weir::builtin_chat_template("llama3"));
    for (const auto* t : {&gemma, &chatml, &llama3}) {
      try {
        g_sink = g_sink + render(*t, r.messages).size();
      } catch (const weir::Error&) {
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  try {
    run(data, size);
  } catch (const weir::Error&) {
  }
  return 0;
}
