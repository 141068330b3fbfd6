// weir serve's HTTP side (cpp-httplib parses and routes): OpenAI's
// /v1/chat/completions and /v1/completions (whole answers, or streamed as
// server-sent events), /v1/embeddings, /v1/models, /health, /metrics
// (Prometheus text), /tokenize, /detokenize. Requests become jobs of the Batcher; a
// client that goes away, streaming or not, cancels its job. With an API key,
// /v1 needs "Authorization: Bearer KEY" (401 otherwise).
//
// Every request's memory and time are bounded (HttpOptions): connections
// wait for their request head in the ConnectionGate (header timeout,
// connection cap), bodies have a size cap (chunked or not) and a deadline,
// JSON a nesting limit, prompts and /tokenize a token limit, chat templates
// an output and work budget. Every error is a JSON body in OpenAI's error
// shape; POSTs must say Content-Type: application/json (415 otherwise, so a
// cross-site form cannot reach the API).
#pragma once
#include <memory>
#include <string>

#include "engine/batcher.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace weir::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;       // 0: any free port (bind() says which)
  // Asked of every request but /health's (Authorization: Bearer KEY,
  // compared in constant time); empty: none asked for.
  std::string api_key;
  bool open_chat_page = false;  // with a key: the chat page (GET /) served without it
  // Request fields weir does not know (engine/openai/request_fields.h): a
  // 400 naming them, as OpenAI's API answers; on: taken, each name logged
  // once (for clients that send extras).
  bool accept_unknown_fields = false;
  std::string model_name = "weir";
  std::string model_path;  // GET /props says it
  int slots = 1;           // requests generated side by side (GET /props: total_slots)
  int64_t n_ctx = 4096;  // for the "too long" message
  // The model makes embeddings only (a BERT encoder: HParams::embeddings_only,
  // non-causal): chat and completions answer 400, and each embedding input
  // runs whole in one step.
  bool embeddings_only = false;
  // Requests handled at once (worker threads): a streaming answer holds one
  // for its whole length, so at least the requests running plus those that
  // may wait, and a few for /health and /metrics.
  int connections = 64;
  // Connections open at once (most of them idle or sending their head);
  // over it, the one that has waited longest for its head is closed.
  int max_connections = 1000;
  double header_timeout_s = 10;   // a request head must arrive within this of the connection (or last response)
  double body_timeout_s = 30;     // and its body within this of the head
  double write_timeout_s = 10;    // a client that reads nothing for this long is dropped
  size_t max_body_bytes = 4 << 20;  // a request body, chunked or not (413 over it)
  int max_json_depth = 64;        // arrays and objects inside each other
  int64_t max_request_tokens = 0;  // a prompt's or /tokenize's tokens (0: n_ctx)
  size_t template_max_output = 16 << 20;       // a chat template's rendered bytes
  uint64_t template_max_work = uint64_t(1) << 28;  // a render's work: statements plus bytes it builds
};

class HttpServer {
 public:
  HttpServer(Batcher& engine, const Tokenizer& tok, const ChatTemplate* chat, HttpOptions o);
  ~HttpServer();
  // Binds the address; returns the port. Throws Error when it cannot.
  int bind();
  // Serves until stop() (from any thread); returns once every connection
  // is closed.
  void run();
  // Stops taking connections; answers in progress end at once (streams
  // with their last chunk, whole answers with a 503), chat template
  // renders included.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir::server
