// weir serve: the OpenAI-compatible HTTP server (src/server). One session,
// one pool of cache cells, every request a job of the continuous-batching
// loop. SIGINT/SIGTERM: stop taking requests, finish the running ones,
// exit 0.
#include <chrono>
#include <cstdio>
#include <thread>

#include "core/error.h"
#include "engine/session.h"
#include "server/generation_engine.h"
#include "server/http_server.h"
#include "text/chat_template.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/common.h"
#include "tools/signals.h"

namespace weir::tools {

int cmd_serve(int argc, char** argv) {
  std::string model_path, host = "127.0.0.1", api_key, template_file, alias, step_log;
  int port = 8080, parallel = 4, threads = default_threads(), ngl = 0, queue = 64, kept = 32;
  int64_t n_ctx = 8192, n_batch = 512;
  GpuFlags gpu_flags;
  KvFlags kv;
  Args a("serve", "An OpenAI-compatible HTTP server: /v1/chat/completions, /v1/completions, /v1/models, /health, "
                  "/metrics, /tokenize, /detokenize.");
  a.opt("-m,--model", &model_path, "FILE", "GGUF model to serve (required)")
      .opt("--host", &host, "ADDR", "address to listen on (default 127.0.0.1)")
      .opt("--port", &port, "N", "port (default 8080; 0: any free one, printed)")
      .opt("-np,--parallel", &parallel, "N", "requests generated side by side (default 4)")
      .opt("-c,--ctx-size", &n_ctx, "N", "KV cache cells shared by all requests (default 8192, at most the model's x parallel)")
      .opt("-b,--batch-size", &n_batch, "N", "tokens a forward step takes: decode tokens and prompt chunks (default 512)")
      .opt("--queue", &queue, "N", "requests that may wait beyond the running ones; more get 503 (default 64)")
      .opt("--cache-prompts", &kept, "N", "finished requests whose cache cells stay for later prompts that begin alike (default 32; 0: no prefix cache: every prompt computed whole)")
      .opt("--log-steps", &step_log, "FILE", "a CSV line a forward step: time, running, tokens, decode tokens, prompt tokens, out rows, KV extent, free cells, seconds")
      .opt("--api-key", &api_key, "KEY", "ask /v1 clients for Authorization: Bearer KEY")
      .opt("--alias", &alias, "NAME", "the model's name in responses (default: the file's name)")
      .opt("--chat-template-file", &template_file, "FILE", "a Jinja chat template instead of the model's")
      .opt("-t,--threads", &threads, "N", "CPU threads (default: all CPUs)")
      .opt("-ngl,--n-gpu-layers", &ngl, "N", "layers on the GPU (0: CPU, default; 99: the whole model)");
  gpu_flags.add_to(a);
  kv.add_to(a);
  if (!a.parse(argc, argv)) return 0;
  check_threads(threads);
  check_device_flag(a.given("--device"), ngl);
  if (port < 0 || port > 65535) throw UsageError("--port: expected 0 to 65535, got " + std::to_string(port));
  if (parallel < 1 || parallel > 256) throw UsageError("--parallel: expected 1 to 256, got " + std::to_string(parallel));
  if (n_ctx < 16) throw UsageError("--ctx-size: expected at least 16 cells, got " + std::to_string(n_ctx));
  if (n_batch < 1) throw UsageError("--batch-size: expected a positive number of tokens, got " + std::to_string(n_batch));
  const DType kv_type = kv.resolve(serving_kv_type(ngl));
  if (kept < 0) throw UsageError("--cache-prompts: expected 0 or more, got " + std::to_string(kept));
  if (queue < 0) throw UsageError("--queue: expected 0 or more, got " + std::to_string(queue));

  auto model = load_model(model_path);
  const Tokenizer& tok = model->tokenizer();
  std::unique_ptr<ChatTemplate> chat;
  try {
    chat = std::make_unique<ChatTemplate>(chat_template_for(*model, template_file));
  } catch (const Error& e) {
    if (!template_file.empty()) throw;
    std::fprintf(stderr, "weir serve: %s\nweir serve: /v1/chat/completions is off; /v1/completions works\n", e.what());
  }
  BackendFlags bf;
  bf.n_gpu_layers = ngl;
  gpu_flags.apply(bf);
  bf.threads = threads;
  bf.n_ctx = n_ctx;
  bf.kv_type = kv_type;
  BackendChoice choice = make_backend(*model, bf);
  SessionParams p;
  p.n_ctx = n_ctx;
  p.kv_type = kv_type;
  p.n_batch = std::min(n_batch, n_ctx);
  p.max_graphs = 128;  // a server's steps come in many shapes (most of them small decode steps)
  choice.join_group(p);
  std::unique_ptr<Session> session = make_session(*model, *choice.backend, p);
  server::EngineOptions eo;
  eo.max_sequences = parallel;
  eo.step_tokens = size_t(p.n_batch);
  eo.queue_limit = size_t(queue);
  eo.kept_prefixes = kept;
  eo.reuse_prefixes = kept > 0;
  std::unique_ptr<FILE, int (*)(FILE*)> log_file(nullptr, fclose);
  if (!step_log.empty()) {
    log_file.reset(std::fopen(step_log.c_str(), "w"));
    if (!log_file) throw Error("--log-steps: cannot write " + step_log);
    std::fputs("time,running,tokens,decode,prompt,out_rows,kv_extent,kv_free,seconds\n", log_file.get());
    FILE* f = log_file.get();
    eo.step_log = [f](const std::string& line) {
      std::fputs(line.c_str(), f);
      std::fputc('\n', f);
    };
  }
  server::GenerationEngine engine(*session, tok, eo);
  server::HttpOptions ho;
  ho.host = host;
  ho.port = port;
  ho.api_key = api_key;
  ho.n_ctx = n_ctx;
  ho.connections = parallel + queue + 8;  // the running, the waiting, and a few for /health, /metrics
  ho.model_name = !alias.empty() ? alias : model_path.substr(model_path.find_last_of('/') + 1);
  server::HttpServer http(engine, tok, chat.get(), ho);
  const int bound = http.bind();
  engine.start();
  std::fprintf(stderr, "weir serve: %s on %s, %d at once, %lld cells; listening on http://%s:%d\n", ho.model_name.c_str(),
               choice.placement.empty() ? "the CPU" : choice.placement.c_str(), parallel, static_cast<long long>(n_ctx),
               host.c_str(), bound);
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
