// weir serve's HTTP side (cpp-httplib): OpenAI's /v1/chat/completions and
// /v1/completions (whole answers, or streamed as server-sent events),
// /v1/models, /health, /metrics (Prometheus text), /tokenize, /detokenize.
// Requests become jobs of the GenerationEngine; a streaming client that
// goes away cancels its job. With an API key, /v1 needs
// "Authorization: Bearer KEY" (401 otherwise).
#pragma once
#include <memory>
#include <string>

#include "server/generation_engine.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace weir::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;       // 0: any free port (bind() says which)
  std::string api_key;   // empty: none asked for
  std::string model_name = "weir";
  int64_t n_ctx = 4096;  // for the "too long" message
  // Connections served at once: a streaming answer holds one for its whole
  // length, so at least the requests running plus those that may wait.
  int connections = 64;
};

class HttpServer {
 public:
  HttpServer(GenerationEngine& engine, const Tokenizer& tok, const ChatTemplate* chat, HttpOptions o);
  ~HttpServer();
  // Binds the address; returns the port. Throws Error when it cannot.
  int bind();
  // Serves until stop() (from any thread).
  void run();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir::server
