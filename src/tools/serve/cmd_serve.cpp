// weir serve: the OpenAI-compatible HTTP server (src/server). One session,
// one pool of cache cells, every request a job of the continuous-batching
// loop. SIGINT/SIGTERM: stop taking requests, end the running ones (a
// stream with an error event, a whole answer with 503), exit 0 within 2 s.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "core/error.h"
#include "engine/session.h"
#include "engine/batcher.h"
#include "engine/spec_setup.h"
#include "server/http_server.h"
#include "text/chat_template.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/common.h"
#include "tools/runtime_flags.h"
#include "tools/signals.h"
#include "tools/spec_flags.h"

namespace weir::tools {

namespace {

// Raises the soft limit of open files toward `want` (the connections and
// workers, plus the model's files and the rest); returns how many
// connections' worth the process may open, warning when that is fewer.
int fit_open_files(int want) {
  constexpr int kOther = 64;  // model files, the listening socket, epoll, pipes
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return want;
  const rlim_t need = rlim_t(want) + kOther;
  if (r.rlim_cur < need) {
    r.rlim_cur = std::min(need, r.rlim_max);
    setrlimit(RLIMIT_NOFILE, &r);
    getrlimit(RLIMIT_NOFILE, &r);
  }
  if (r.rlim_cur >= need) return want;
  const int fits = std::max(16, int(r.rlim_cur) - kOther);
  std::fprintf(stderr, "weir serve: the open-file limit (%llu) leaves room for %d connections and workers, not %d: --max-connections lowered\n",
               static_cast<unsigned long long>(r.rlim_cur), fits, want);
  return fits;
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  std::string model_path, host = "127.0.0.1", api_key, template_file, alias, step_log;
  bool open_chat_page = false, accept_unknown_fields = false;
  int port = 8080, parallel = 4, queue = 64, kept = 32;
  const server::HttpOptions defaults;
  int64_t max_body = 0, max_request_tokens = 0;  // 0: set from -c
  int max_connections = defaults.max_connections;
  float header_timeout = float(defaults.header_timeout_s), body_timeout = float(defaults.body_timeout_s);
  uint64_t template_max_output = defaults.template_max_output, template_max_work = defaults.template_max_work;
  RuntimeFlags rf;
  RuntimeFlags::Defaults d;
  d.n_ctx = 8192;
  d.ctx_help = "KV cache cells shared by all requests (default 8192)";
  d.n_ctx_at_most_trained = false;
  Args a("serve", "An OpenAI-compatible HTTP server: /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models, /health, "
                  "/metrics, /tokenize, /detokenize.");
  a.opt("-m,--model", &model_path, "FILE", "GGUF model to serve (required)")
      .opt("--host", &host, "ADDR", "address to listen on (default 127.0.0.1)")
      .opt("--port", &port, "N", "port (default 8080; 0: any free one, printed)")
      .opt("-np,--parallel", &parallel, "N", "requests generated side by side (default 4)")
      .opt("--queue", &queue, "N", "requests that may wait beyond the running ones; more get 503 (default 64)")
      .opt("--cache-prompts", &kept, "N", "finished requests whose cache cells stay for later prompts that begin alike (default 32; 0: no prefix cache: every prompt computed whole)")
      .opt("--log-steps", &step_log, "FILE", "a CSV line a forward step: time, running, tokens, decode tokens, prompt tokens, out rows, KV extent, free cells, seconds, guesses (speculative decoding)")
      .opt("--api-key", &api_key, "KEY", "ask every request but /health's for Authorization: Bearer KEY")
      .flag("--accept-unknown-fields", &accept_unknown_fields, "take request fields weir does not know (each name logged once) instead of answering 400 naming them")
      .flag("--open-chat-page", &open_chat_page, "with --api-key: serve the chat page (GET /) without the key (it asks for the key itself)")
      .opt("--alias", &alias, "NAME", "the model's name in responses (default: the file's name)")
      .opt("--chat-template-file", &template_file, "FILE", "a Jinja chat template instead of the model's")
      .opt("--max-body", &max_body, "BYTES", "a request body's size at most, chunked or not; over it: 413 (default: 4 MiB, or 32 bytes a context cell where that is more)")
      .opt("--max-request-tokens", &max_request_tokens, "N", "a prompt's or /tokenize's tokens at most (default: the context's size)")
      .opt("--max-connections", &max_connections, "N", "connections open at once; over it, the one that has waited longest for its request head is closed (default 1000)")
      .opt("--header-timeout", &header_timeout, "SECONDS", "a request head must arrive within this of the connection or the last response; else it is closed (default 10)")
      .opt("--body-timeout", &body_timeout, "SECONDS", "a request body must arrive within this of its head (default 30)")
      .opt("--template-max-output", &template_max_output, "BYTES", "a chat template's rendered prompt at most (default 16 MiB)")
      .opt("--template-max-work", &template_max_work, "N", "a chat template render's work at most: its statements plus the bytes it builds (default 2^28)");
  rf.add_to(a, d);
  SpecFlags sf;
  sf.add_to(a);
  if (!a.parse(argc, argv)) return 0;
  rf.parsed(a);
  const SpecOptions spec_options = sf.options(a);
  RuntimeSpec spec = rf.spec(model_path);
  spec.max_graphs = 128;  // a server's steps come in many shapes (most of them small decode steps)
  spec.stop_steps = false;  // a stop signal ends the load; the HTTP side ends the requests (no step fails half-done)
  const int64_t n_ctx = spec.n_ctx;
  if (port < 0 || port > 65535) throw UsageError("--port: expected 0 to 65535, got " + std::to_string(port));
  if (parallel < 1 || parallel > 256) throw UsageError("--parallel: expected 1 to 256, got " + std::to_string(parallel));
  if (n_ctx < 16) throw UsageError("--ctx-size: expected at least 16 cells, got " + std::to_string(n_ctx));
  if (kept < 0) throw UsageError("--cache-prompts: expected 0 or more, got " + std::to_string(kept));
  if (queue < 0) throw UsageError("--queue: expected 0 or more, got " + std::to_string(queue));
  if (max_body == 0) max_body = std::max<int64_t>(int64_t(4) << 20, 32 * n_ctx);
  if (max_body < 1024) throw UsageError("--max-body: expected at least 1024 bytes, got " + std::to_string(max_body));
  if (max_request_tokens < 0) throw UsageError("--max-request-tokens: expected 1 or more, got " + std::to_string(max_request_tokens));
  if (max_connections < 1) throw UsageError("--max-connections: expected 1 or more, got " + std::to_string(max_connections));
  if (!(header_timeout > 0) || !(body_timeout > 0))
    throw UsageError(std::string(header_timeout > 0 ? "--body-timeout" : "--header-timeout") + ": expected a positive number of seconds");
  if (template_max_output < 1024 || template_max_work < 1024)
    throw UsageError(std::string(template_max_output < 1024 ? "--template-max-output" : "--template-max-work") + ": expected at least 1024");
  const int workers = parallel + queue + 16;  // the running, the waiting, and some for /health, /metrics, /tokenize
  max_connections = std::max(16, fit_open_files(max_connections + workers) - workers);

  Runtime rt = build_runtime(spec);
  const Model& model = *rt.model;
  const Tokenizer& tok = model.tokenizer();
  // A draft model (-md): its own runtime, checked against the target's
  // vocabulary and size first (one line naming the difference).
  std::unique_ptr<Runtime> draft;
  if (spec_options.mode == SpecMode::Draft) {
    if (model.hparams().embeddings_only) throw UsageError("-md: " + model.hparams().arch + " only makes embeddings; a draft model has nothing to guess");
    draft = make_batch_draft(spec_options, spec, model, rt.session->n_ctx(), rt.session->n_batch(), spec.max_graphs);
  }
  std::unique_ptr<ChatTemplate> chat;
  if (model.hparams().embeddings_only) {  // a BERT encoder: no chat template to look for
    std::fprintf(stderr, "weir serve: %s only makes embeddings: /v1/embeddings works; chat and completions answer 400\n",
                 model.hparams().arch.c_str());
  } else {
    try {
      chat = std::make_unique<ChatTemplate>(chat_template_for(model, template_file));
    } catch (const Error& e) {
      if (!template_file.empty()) throw;
      std::fprintf(stderr, "weir serve: %s\nweir serve: /v1/chat/completions is off; /v1/completions works\n", e.what());
    }
  }
  Session* session = rt.session.get();
  BatcherOptions eo;
  eo.max_sequences = parallel;
  eo.step_tokens = size_t(session->n_batch());  // step_tokens(spec), or a non-causal model's context (build_runtime)
  eo.queue_limit = size_t(queue);
  eo.kept_prefixes = kept;
  eo.reuse_prefixes = kept > 0;
  eo.spec = spec_options;
  eo.draft = draft ? draft->session.get() : nullptr;
  std::unique_ptr<FILE, int (*)(FILE*)> log_file(nullptr, fclose);
  if (!step_log.empty()) {
    log_file.reset(std::fopen(step_log.c_str(), "w"));
    if (!log_file) throw Error("--log-steps: cannot write " + step_log);
    std::fputs("time,running,tokens,decode,prompt,out_rows,kv_extent,kv_free,seconds,guesses\n", log_file.get());
    FILE* f = log_file.get();
    eo.step_log = [f](const std::string& line) {
      std::fputs(line.c_str(), f);
      std::fputc('\n', f);
    };
  }
  Batcher engine(*session, tok, eo);
  server::HttpOptions ho;
  ho.host = host;
  ho.port = port;
  ho.api_key = api_key;
  ho.open_chat_page = open_chat_page;
  ho.accept_unknown_fields = accept_unknown_fields;
  ho.n_ctx = n_ctx;
  ho.embeddings_only = model.hparams().embeddings_only;
  ho.connections = workers;
  ho.max_connections = max_connections;
  ho.header_timeout_s = header_timeout;
  ho.body_timeout_s = body_timeout;
  ho.max_body_bytes = size_t(max_body);
  ho.max_request_tokens = max_request_tokens;
  ho.template_max_output = template_max_output;
  ho.template_max_work = template_max_work;
  ho.model_name = !alias.empty() ? alias : model_path.substr(model_path.find_last_of('/') + 1);
  ho.model_path = model_path;
  ho.slots = parallel;
  server::HttpServer http(engine, tok, chat.get(), ho);
  const int bound = http.bind();
  engine.start();
  const std::string spec_note = spec_options.mode == SpecMode::Ngram ? ", n-gram speculation"
                                : draft ? ", draft model " + draft->model->file().name()
                                        : "";
  std::fprintf(stderr, "weir serve: %s on %s, %d at once, %lld cells%s; listening on http://%s:%d\n", ho.model_name.c_str(),
               rt.backends.placement.empty() ? "the CPU" : rt.backends.placement.c_str(), parallel, static_cast<long long>(n_ctx),
               spec_note.c_str(), host.c_str(), bound);
  std::fflush(stderr);
  std::thread watcher([&] {
    while (!stop_requested()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    http.stop();
  });
  http.run();  // until a stop signal
  if (!stop_requested()) http.stop();
  engine.stop();  // the running requests finish
  watcher.join();
  std::fprintf(stderr, "weir serve: stopped (%s)\n", stop_requested() ? stop_signal_name() : "server ended");
  return 0;
}

}  // namespace weir::tools
