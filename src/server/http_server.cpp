#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <set>

#include "core/error.h"
#include "server/chat_page.h"
#include "server/connection_gate.h"
#include "server/connection_stream.h"
#include "engine/openai/json_body.h"
#include "engine/openai/answer.h"
#include "engine/openai/embeddings.h"
#include "engine/openai/request.h"
#include "engine/openai/response.h"
#include "text/utf8_streamer.h"

namespace weir::server {

using nlohmann::json;
using namespace weir::openai;  // the API's shapes: requests, answers, errors

namespace {

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_json(e).dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

// What the worker thread now serving a request knows of its connection:
// the handlers ask whether the client is still there, and say when the
// connection cannot carry another request (a body left unread).
struct RequestState {
  ConnectionStream* stream = nullptr;
  bool close_after = false;
};
thread_local RequestState t_request;

bool has_body(const httplib::Request& req) {
  return req.get_header_value<uint64_t>("Content-Length") > 0 || req.get_header_value("Transfer-Encoding").find("chunked") != std::string::npos;
}

bool is_json(const std::string& content_type) {
  const std::string type = content_type.substr(0, content_type.find(';'));
  std::string t;
  for (char c : type)
    if (c != ' ' && c != '\t') t += char(std::tolower(static_cast<unsigned char>(c)));
  return t == "application/json";
}

const char* const kShuttingDown = "the server is shutting down";

// The POST endpoints; each reads its own body (a JSON object).
// Whether a equals b, in a time that depends on b's length alone (b: the
// expected secret), so that the answer's time says nothing of a's prefix.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < b.size(); ++i) diff |= static_cast<unsigned char>((i < a.size() ? a[i] : 0) ^ b[i]);
  return diff == 0;
}

const char* const kPostPaths[] = {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/tokenize", "/detokenize"};

}  // namespace

// cpp-httplib's server with its connection handling replaced: the accept
// loop hands each socket to the gate (process_and_close_socket runs on the
// accepting thread, through a task queue that runs tasks at once), and the
// gate's workers run one request at a time through process_request.
class GatedServer : public httplib::Server {
 public:
  ConnectionGate* gate = nullptr;
  bool serve_one(Connection& c, Clock::time_point body_deadline, std::chrono::milliseconds write_timeout, bool last) {
    ConnectionStream stream(c, body_deadline, write_timeout);
    t_request = {&stream, false};
    bool closed = false;
    const bool ok = process_request(stream, last, closed, nullptr);
    const bool keep = ok && !closed && !last && !t_request.close_after;
    t_request = {};
    return keep;
  }

 private:
  bool process_and_close_socket(int sock) override {
    gate->add(sock);
    return true;
  }
};

namespace {

struct RunAtOnce : httplib::TaskQueue {
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

}  // namespace

struct HttpServer::Impl {
  Batcher& engine;
  const Tokenizer& tok;
  const ChatTemplate* chat;
  HttpOptions o;
  jinja::RenderLimits render_limits;
  GatedServer svr;
  std::unique_ptr<ConnectionGate> gate;
  std::atomic<bool> stopping{false};
  int port = -1;
  int listen_fd = -1;
  std::mutex unknown_m;
  std::set<std::string> unknown_logged;  // unknown request fields said on stderr

  Impl(Batcher& e, const Tokenizer& t, const ChatTemplate* c, HttpOptions opts)
      : engine(e), tok(t), chat(c), o(std::move(opts)) {
    if (o.max_request_tokens <= 0) o.max_request_tokens = o.n_ctx;
    render_limits.max_output_bytes = o.template_max_output;
    render_limits.max_work = o.template_max_work;
    render_limits.stop = &stopping;
    GateOptions g;
    g.max_connections = o.max_connections;
    g.workers = std::max(1, o.connections);
    g.header_timeout_s = o.header_timeout_s;
    const auto body_time = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.body_timeout_s));
    const auto write_time = std::chrono::milliseconds(int64_t(o.write_timeout_s * 1000));
    gate = std::make_unique<ConnectionGate>(g, [this, body_time, write_time](Connection& c) {
      return svr.serve_one(c, Clock::now() + body_time, write_time, stopping.load());
    });
    svr.gate = gate.get();
    svr.new_task_queue = [] { return new RunAtOnce(); };
    svr.set_keep_alive_timeout(time_t(o.header_timeout_s));  // what the Keep-Alive header says
    svr.set_keep_alive_max_count(1000);
    // The listening socket, to give it a longer queue of connections than
    // the library's 5 (64 clients connecting at once were reset).
    // SO_REUSEADDR only: the library's SO_REUSEPORT would let a second
    // server on the same port share its clients.
    svr.set_socket_options([this](int sock) {
      const int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
      listen_fd = sock;
    });
    svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      try {
        admit(req);
        return httplib::Server::HandlerResponse::Unhandled;
      } catch (const ApiError& e) {
        send_error(res, e);
        if (has_body(req)) close_after(res);  // its body stays unread
        return httplib::Server::HandlerResponse::Handled;
      }
    });
    // Statuses the library sets itself (404, 400 for a bad request line)
    // come with a JSON body too.
    svr.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      std::string what = res.status == 404 ? "no such endpoint: " + req.method + " " + req.path.substr(0, 200)
                                            : "the request was refused (HTTP " + std::to_string(res.status) + ")";
      send_error(res, ApiError(res.status, error_type(res.status), "", utf8_or_replacement(what)));
      return httplib::Server::HandlerResponse::Handled;
    }));
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
      send_error(res, ApiError(500, "server_error", "", "the server failed on this request"));
    });
    svr.Get("/", [](const httplib::Request&, httplib::Response& res) {
      const std::string_view page = chat_page_html();
      res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
    });
    svr.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      json m = {{"id", o.model_name}, {"object", "model"}, {"created", now_seconds()}, {"owned_by", "weir"}};
      res.set_content(dump(json{{"object", "list"}, {"data", json::array({m})}}), "application/json");
    });
    // llama-server's /props, read only: the context, the sampling defaults
    // a request starts from, the slots, the model and its chat template.
    svr.Get("/props", [this](const httplib::Request&, httplib::Response& res) {
      const GenerationRequest d;  // the defaults
      const json params = {{"temperature", d.temperature}, {"top_p", d.top_p},
                           {"top_k", d.top_k},             {"min_p", d.min_p},
                           {"presence_penalty", d.presence_penalty}, {"frequency_penalty", d.frequency_penalty},
                           {"n_predict", d.max_tokens},   {"ignore_eos", d.ignore_eos}};
      const json props = {
          {"default_generation_settings", {{"n_ctx", o.n_ctx}, {"params", params}}},
          {"total_slots", o.slots},
          {"model_alias", o.model_name},
          {"model_path", o.model_path},
          {"chat_template", chat ? json(chat->source()) : json(nullptr)},
          {"modalities", {{"vision", false}, {"audio", false}}},
      };
      res.set_content(dump(props), "application/json");
    });
    // llama-server's /slots, read only: one entry a slot (-np), what runs
    // there as the last step began.
    svr.Get("/slots", [this](const httplib::Request&, httplib::Response& res) {
      json slots = json::array();
      const std::vector<Batcher::Running> run = engine.running();
      for (int i = 0; i < o.slots; ++i) {
        json s = {{"id", i}, {"n_ctx", o.n_ctx}, {"is_processing", size_t(i) < run.size()}};
        if (size_t(i) < run.size()) {
          const Batcher::Running& r = run[size_t(i)];
          s["id_task"] = r.id;
          s["n_prompt_tokens"] = r.prompt_tokens;
          s["n_prompt_tokens_processed"] = r.prompt_done;
          s["next_token"] = {{"has_next_token", true}, {"n_decoded", r.generated},
                             {"n_remain", r.max_tokens > 0 ? r.max_tokens - r.generated : -1}};
          s["constrained"] = r.constrained;
        } else {
          s["id_task"] = -1;
        }
        slots.push_back(std::move(s));
      }
      res.set_content(dump(slots), "application/json");
    });
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) { res.set_content(metrics(), "text/plain; version=0.0.4"); });
    // llama-server's /tokenize: content, add_special (BOS and the like,
    // default false), parse_special (special tokens written as text, default
    // true), with_pieces ({"id", "piece"} a token; a piece that is not
    // whole UTF-8 as its bytes).
    post("/tokenize", [this](const json& b, httplib::Response& res) {
      for (const auto& [k, v] : b.items())
        if (k != "content" && k != "add_special" && k != "parse_special" && k != "with_pieces")
          throw bad_request(k.size() > 200 ? "" : k,
                            "'" + utf8_or_replacement(k.substr(0, 200)) + "' is not a field of /tokenize");
      if (!b.contains("content") || !b["content"].is_string()) throw bad_request("content", "'content' must be a string");
      const auto flag = [&](const char* name, bool dflt) {
        auto it = b.find(name);
        if (it == b.end() || it->is_null()) return dflt;
        if (!it->is_boolean()) throw bad_request(name, "'" + std::string(name) + "' must be a boolean");
        return it->get<bool>();
      };
      const bool add_special = flag("add_special", false), parse_special = flag("parse_special", true);
      const bool with_pieces = flag("with_pieces", false);
      const std::vector<int32_t> ids =
          encode_limited(tok, b["content"].get_ref<const std::string&>(), add_special, parse_special,
                         size_t(o.max_request_tokens), "content", "the server's --max-request-tokens");
      if (!with_pieces) {
        std::string out = "{\"tokens\":[";
        for (size_t i = 0; i < ids.size(); ++i) (out += i ? "," : "") += std::to_string(ids[i]);
        res.set_content(out + "]}", "application/json");
        return;
      }
      json tokens = json::array();
      for (int32_t id : ids) {
        const std::string piece = tok.token_to_piece(id, true);
        json p = is_valid_utf8(piece) ? json(piece) : json::array();
        if (!p.is_string())
          for (unsigned char c : piece) p.push_back(int(c));
        tokens.push_back(json{{"id", id}, {"piece", p}});
      }
      res.set_content(dump(json{{"tokens", tokens}}), "application/json");
    });
    post("/detokenize", [this](const json& b, httplib::Response& res) {
      if (!b.contains("tokens") || !b["tokens"].is_array()) throw bad_request("tokens", "'tokens' must be an array of ids");
      std::string text;
      for (const json& t : b["tokens"]) text += tok.token_to_piece(token_id(t, tok.vocab().n_tokens(), "tokens"), false);
      res.set_content(dump(json{{"content", text}}), "application/json");
    });
    post("/v1/chat/completions", [this](const json& b, httplib::Response& res) {
      refuse_if_embeddings_only();
      generate(logged(parse_chat_request(b, o.accept_unknown_fields)), res);
    });
    post("/v1/completions", [this](const json& b, httplib::Response& res) {
      refuse_if_embeddings_only();
      generate(logged(parse_completion_request(b, o.accept_unknown_fields)), res);
    });
    // Run on the engine's thread between generation steps (Batcher::submit_work).
    post("/v1/embeddings", [this](const json& b, httplib::Response& res) {
      const EmbeddingRequest r = parse_embedding_request(b, o.accept_unknown_fields);
      note_unknown(r.unknown_fields);
      if (stopping) throw ApiError(503, "server_overloaded", "", kShuttingDown);
      const EmbeddingContext ctx{engine, tok, o.model_name, o.max_request_tokens, o.embeddings_only};
      res.set_content(dump(create_embeddings(ctx, r)), "application/json");
    });
  }

  void refuse_if_embeddings_only() const {
    if (o.embeddings_only)
      throw ApiError(400, "invalid_request_error", "model",
                     "this model only makes embeddings (it has no language model head): use /v1/embeddings");
  }

  static std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

  // The unknown fields a request came with (--accept-unknown-fields), each
  // name said once on stderr.
  GenerationRequest logged(GenerationRequest r) {
    note_unknown(r.unknown_fields);
    return r;
  }
  void note_unknown(const std::vector<std::string>& fields) {
    if (fields.empty()) return;
    std::lock_guard<std::mutex> lk(unknown_m);
    for (const std::string& f : fields)
      if (unknown_logged.size() < 256 && unknown_logged.insert(f).second)
        std::fprintf(stderr, "weir serve: took a request with the unknown field '%s' (not used)\n", f.c_str());
  }

  // The response says the connection ends with it (its body was not read).
  static void close_after(httplib::Response& res) {
    t_request.close_after = true;
    res.set_header("Connection", "close");
  }

  // Before routing: the key, the body's declared size and type, and
  // bodies only where a handler reads them.
  void admit(const httplib::Request& req) {
    const bool open = req.path == "/health" || (req.path == "/" && o.open_chat_page);
    if (!o.api_key.empty() && !open && !same_secret(req.get_header_value("Authorization"), "Bearer " + o.api_key))
      throw ApiError(401, "authentication_error", "", "a valid API key is needed: Authorization: Bearer KEY");
    bool post_path = false;
    for (const char* p : kPostPaths) post_path |= req.path == p;
    if (req.method == "POST" && post_path) {
      if (!is_json(req.get_header_value("Content-Type")))
        throw ApiError(415, "invalid_request_error", "", "the body must be JSON, sent with Content-Type: application/json");
      const uint64_t declared = req.get_header_value<uint64_t>("Content-Length");
      if (declared > o.max_body_bytes) throw body_too_large();
      return;
    }
    if (has_body(req))
      throw ApiError(post_path ? 405 : 404, post_path ? "invalid_request_error" : "not_found_error", "",
                     utf8_or_replacement("no such endpoint: " + req.method + " " + req.path.substr(0, 200)));
  }

  ApiError body_too_large() const {
    return ApiError(413, "invalid_request_error", "",
                    "the body is over " + std::to_string(o.max_body_bytes) + " bytes (the server's --max-body)");
  }

  // A POST endpoint: reads the body within its limits, parses it, runs f.
  template <typename F>
  void post(const char* path, F f) {
    svr.Post(path, [this, f](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
      handle(res, [&] {
        std::string body;
        body.reserve(std::min<uint64_t>(req.get_header_value<uint64_t>("Content-Length"), o.max_body_bytes));
        bool over = false;
        // Neither a length nor chunks: no body (RFC 9112 6.3), not one that
        // ends when the client closes.
        const bool whole = !has_body(req) || reader([&](const char* data, size_t n) {
          if (body.size() + n > o.max_body_bytes) {
            over = true;
            return false;
          }
          body.append(data, n);
          return true;
        });
        if (!whole) {
          close_after(res);
          if (over) throw body_too_large();
          throw ApiError(408, "invalid_request_error", "", "the body did not arrive in time (the server's body timeout)");
        }
        JsonLimits jl;
        jl.max_depth = o.max_json_depth;
        const json b = parse_json_body(body, jl);
        std::string().swap(body);
        f(b, res);
      });
    });
  }

  template <typename F>
  void handle(httplib::Response& res, F&& f) {
    try {
      f();
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const QueueFull& e) {
      res.set_header("Retry-After", "1");
      send_error(res, ApiError(503, "server_overloaded", "", e.what()));
    } catch (const Error& e) {
      send_error(res, ApiError(400, "invalid_request_error", "", utf8_or_replacement(e.what())));
    } catch (const std::bad_alloc&) {
      send_error(res, ApiError(503, "server_overloaded", "", "the server is out of memory for this request"));
    } catch (const std::exception&) {
      send_error(res, ApiError(500, "server_error", "", "the server failed on this request"));
    }
  }

  void generate(const GenerationRequest& r, httplib::Response& res) {
    if (stopping) throw ApiError(503, "server_overloaded", "", kShuttingDown);
    AnswerContext ctx{engine, tok, chat, o.model_name, o.n_ctx};
    ctx.max_prompt_tokens = o.max_request_tokens;
    ctx.render_limits = &render_limits;
    std::shared_ptr<Answer> answer = Answer::start(ctx, r);
    if (!r.stream) {
      ConnectionStream* stream = t_request.stream;
      while (!answer->wait_done(std::chrono::milliseconds(100))) {
        if (stopping) answer->abandon(503, kShuttingDown);  // ends at the engine's next step
        if (stream && stream->peer_closed()) {  // nobody to answer: its cells go back now
          answer->cancel();
          close_after(res);
          return;
        }
      }
      if (stopping) answer->abandon(503, kShuttingDown);  // a step the stop interrupted fails as this
      res.set_content(dump(answer->whole()), "application/json");
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [this, answer](size_t, httplib::DataSink& sink) {
          if (stopping) answer->abandon(503, kShuttingDown);  // its last chunk comes at once
          std::string out;
          for (const json& chunk : answer->next_chunks(std::chrono::milliseconds(100))) out += sse_event(chunk);
          if (answer->ended()) out += sse_done();
          if (!out.empty() && !sink.write(out.data(), out.size())) {
            answer->cancel();  // the client went away
            return false;
          }
          if (!sink.is_writable()) {
            answer->cancel();
            return false;
          }
          if (answer->ended()) sink.done();
          return true;
        },
        [answer](bool success) {
          if (!success) answer->cancel();
        });
  }

  std::string metrics() const {
    const Batcher::Stats s = engine.stats();
    const ConnectionGate::Stats c = gate->stats();
    std::string m;
    auto line = [&](const char* name, const char* type, const char* help, double v) {
      m += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
           std::to_string(v) + "\n";
    };
    line("weir_requests_total", "counter", "requests taken", double(s.requests));
    line("weir_prompt_tokens_total", "counter", "prompt tokens computed", double(s.prompt_tokens));
    line("weir_generated_tokens_total", "counter", "tokens generated", double(s.generated_tokens));
    line("weir_steps_total", "counter", "forward steps", double(s.steps));
    line("weir_step_seconds_total", "counter", "time in forward steps", s.step_seconds);
    line("weir_graphs_built_total", "counter", "forward graphs built (a step of a new shape)", double(s.graphs_built));
    line("weir_graph_build_seconds_total", "counter", "time building and planning forward graphs", s.graph_build_seconds);
    line("weir_step_host_seconds_total", "counter", "host time of the steps before their runs are queued", s.step_host_seconds);
    line("weir_queue_depth", "gauge", "requests waiting", double(s.queued));
    line("weir_running", "gauge", "requests being generated", double(s.running));
    line("weir_prompt_tokens_reused_total", "counter", "prompt tokens taken from the prefix cache", double(s.reused_tokens));
    line("weir_set_back_total", "counter", "requests set back to the queue for want of KV cells", double(s.set_back));
    line("weir_spec_guesses_drafted_total", "counter", "speculative guesses checked (--spec ngram, -md)", double(s.guesses_drafted));
    line("weir_spec_guesses_accepted_total", "counter", "speculative guesses kept (counted in weir_generated_tokens_total too)", double(s.guesses_accepted));
    line("weir_kv_cells_used", "gauge", "KV cache cells in use (kept prefixes included)", double(s.kv_cells_used));
    line("weir_kept_prefixes", "gauge", "finished requests whose cells are kept for reuse", double(s.kept_prefixes));
    line("weir_http_connections", "gauge", "client connections open", double(c.open));
    line("weir_http_connections_waiting", "gauge", "connections idle or sending their request head", double(c.waiting));
    line("weir_http_requests_active", "gauge", "requests being handled", double(c.busy));
    line("weir_http_connections_total", "counter", "connections accepted", double(c.accepted));
    line("weir_http_connections_evicted_total", "counter", "connections closed to make room (the limit reached)", double(c.evicted));
    line("weir_http_header_timeouts_total", "counter", "connections closed for a request head that came too slowly", double(c.header_timeouts));
    line("weir_http_heads_too_large_total", "counter", "connections closed for a request head over the limit", double(c.too_large));
    return m;
  }
};

HttpServer::HttpServer(Batcher& engine, const Tokenizer& tok, const ChatTemplate* chat, HttpOptions o)
    : impl_(std::make_unique<Impl>(engine, tok, chat, std::move(o))) {}
HttpServer::~HttpServer() {
  stop();
  if (impl_) impl_->gate->shutdown();
}

int HttpServer::bind() {
  Impl& i = *impl_;
  i.port = i.o.port == 0 ? i.svr.bind_to_any_port(i.o.host.c_str()) : (i.svr.bind_to_port(i.o.host.c_str(), i.o.port) ? i.o.port : -1);
  if (i.port < 0) throw Error("serve: cannot listen on " + i.o.host + ":" + std::to_string(i.o.port) + " (in use, or not this host's address)");
  // A listening socket takes a new backlog: room for a burst of connections
  // (the gate takes them as fast as it can and evicts past its limit); a
  // full backlog drops a client's SYN, which then waits a second to retry.
  if (i.listen_fd >= 0) ::listen(i.listen_fd, std::max(4096, i.o.connections * 2));
  return i.port;
}

void HttpServer::run() {
  if (!impl_->stopping) impl_->svr.listen_after_bind();
  impl_->gate->shutdown();  // the requests being handled end (stop() told them), the rest are closed
}

void HttpServer::stop() {
  if (!impl_ || impl_->stopping.exchange(true)) return;
  // The library's stop() does nothing until its accept loop has started; a
  // stop that comes between bind() and run() would be lost, and run() would
  // serve on. A listening socket shut down makes that loop's accept() fail
  // at once, whenever it starts.
  if (impl_->listen_fd >= 0) ::shutdown(impl_->listen_fd, SHUT_RDWR);
  impl_->svr.stop();
}

}  // namespace weir::server
