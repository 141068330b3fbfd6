#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>

#include "core/error.h"
#include "server/chat_page.h"
#include "server/openai_answer.h"
#include "server/openai_request.h"
#include "server/openai_response.h"

namespace weir::server {

using nlohmann::json;

namespace {

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_json(e).dump(), "application/json");
}


}  // namespace

struct HttpServer::Impl {
  GenerationEngine& engine;
  const Tokenizer& tok;
  const ChatTemplate* chat;
  HttpOptions o;
  httplib::Server svr;
  int port = -1;
  int listen_fd = -1;

  Impl(GenerationEngine& e, const Tokenizer& t, const ChatTemplate* c, HttpOptions opts)
      : engine(e), tok(t), chat(c), o(std::move(opts)) {
    svr.set_payload_max_length(size_t(16) << 20);
    const size_t threads = size_t(std::max(1, o.connections));
    svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
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
      if (o.api_key.empty() || req.path.rfind("/v1/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
      if (req.get_header_value("Authorization") == "Bearer " + o.api_key) return httplib::Server::HandlerResponse::Unhandled;
      send_error(res, ApiError(401, "authentication_error", "", "a valid API key is needed: Authorization: Bearer KEY"));
      return httplib::Server::HandlerResponse::Handled;
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
      res.set_content(json{{"object", "list"}, {"data", json::array({m})}}.dump(), "application/json");
    });
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) { res.set_content(metrics(), "text/plain; version=0.0.4"); });
    svr.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
      handle(res, [&] {
        const json b = parse(req.body);
        if (!b.contains("content") || !b["content"].is_string()) throw bad_request("content", "'content' must be a string");
        res.set_content(json{{"tokens", tok.encode(b["content"].get<std::string>(), false, true)}}.dump(), "application/json");
      });
    });
    svr.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
      handle(res, [&] {
        const json b = parse(req.body);
        if (!b.contains("tokens") || !b["tokens"].is_array()) throw bad_request("tokens", "'tokens' must be an array of ids");
        std::string text;
        for (const json& t : b["tokens"]) {
          if (!t.is_number_integer() || !tok.vocab().valid(t.get<int32_t>())) throw bad_request("tokens", "'tokens' holds an id outside the vocabulary");
          text += tok.token_to_piece(t.get<int32_t>(), false);
        }
        res.set_content(json{{"content", text}}.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
      });
    });
    svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      handle(res, [&] { generate(parse_chat_request(parse(req.body)), res); });
    });
    svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      handle(res, [&] { generate(parse_completion_request(parse(req.body)), res); });
    });
  }

  static json parse(const std::string& body) {
    try {
      return json::parse(body);
    } catch (const json::exception& e) {
      throw bad_request("", std::string("the body is not valid JSON: ") + e.what());
    }
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
      send_error(res, ApiError(400, "invalid_request_error", "", e.what()));
    } catch (const std::exception& e) {
      send_error(res, ApiError(500, "server_error", "", e.what()));
    }
  }

  void generate(const GenerationRequest& r, httplib::Response& res) {
    const AnswerContext ctx{engine, tok, chat, o.model_name, o.n_ctx};
    std::shared_ptr<Answer> answer = Answer::start(ctx, r);
    if (!r.stream) {
      answer->wait_done(std::chrono::hours(24 * 365));
      res.set_content(answer->whole().dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [answer](size_t, httplib::DataSink& sink) {
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
    const GenerationEngine::Stats s = engine.stats();
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
    line("weir_kv_cells_used", "gauge", "KV cache cells in use (kept prefixes included)", double(s.kv_cells_used));
    line("weir_kept_prefixes", "gauge", "finished requests whose cells are kept for reuse", double(s.kept_prefixes));
    return m;
  }
};

HttpServer::HttpServer(GenerationEngine& engine, const Tokenizer& tok, const ChatTemplate* chat, HttpOptions o)
    : impl_(std::make_unique<Impl>(engine, tok, chat, std::move(o))) {}
HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  Impl& i = *impl_;
  i.port = i.o.port == 0 ? i.svr.bind_to_any_port(i.o.host.c_str()) : (i.svr.bind_to_port(i.o.host.c_str(), i.o.port) ? i.o.port : -1);
  if (i.port < 0) throw Error("serve: cannot listen on " + i.o.host + ":" + std::to_string(i.o.port) + " (in use, or not this host's address)");
  if (i.listen_fd >= 0) ::listen(i.listen_fd, std::max(128, i.o.connections * 2));  // a listening socket takes a new backlog
  return i.port;
}

void HttpServer::run() { impl_->svr.listen_after_bind(); }
void HttpServer::stop() {
  if (impl_) impl_->svr.stop();
}

}  // namespace weir::server
