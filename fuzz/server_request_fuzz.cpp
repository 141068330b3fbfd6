// libFuzzer target for what a client's bytes reach in weir serve before the
// model: the request body (JSON, then the chat or completion request's
// fields), the messages through a chat template, and token ids through the
// detokenizer's checks. The first byte picks the path:
//   0: a chat request body;  1: a completion request body;
//   2: a chat template and messages ("<template>\0<messages json>"), rendered;
//   3: a request body whose messages go through the built-in Gemma 3,
//      ChatML and Llama 3 templates.
// Only weir::Error (and the API's 400s, which are Errors) may escape;
// anything else (another exception, a crash, a sanitizer report) is a bug.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "server/openai_request.h"
#include "text/chat_template.h"
#include "text/jinja/template.h"

namespace {

volatile size_t g_sink;

std::string render(const weir::jinja::Template& t, const nlohmann::json& messages) {
  nlohmann::json ctx = {{"messages", messages}, {"add_generation_prompt", true}, {"bos_token", "<bos>"}};
  return t.render(weir::jinja::value_from_json(ctx.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
}

void run(const uint8_t* data, size_t size) {
  const int path = data[0] % 4;
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
  const nlohmann::json body = nlohmann::json::parse(rest, nullptr, false);
  if (body.is_discarded()) return;
  if (path == 1) {
    const weir::server::GenerationRequest r = weir::server::parse_completion_request(body);
    g_sink = g_sink + r.prompt.size() + r.prompt_tokens.size() + r.stop.size();
    return;
  }
  const weir::server::GenerationRequest r = weir::server::parse_chat_request(body);
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
