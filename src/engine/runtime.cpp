#include "engine/runtime.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "core/error.h"
#include "core/units.h"
#include "core/warn.h"
#include "model/kv_cache.h"
#include "sched/scheduler.h"

namespace weir {

int default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}

int default_load_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return int(std::clamp(n, 1u, 8u));
}

DType default_kv_type(int n_gpu_layers) { return n_gpu_layers > 0 ? DType::F16 : DType::F32; }

int64_t step_tokens(const RuntimeSpec& s) {
  const int64_t step = std::min(s.n_batch, s.n_ubatch);
  return s.n_ctx > 0 ? std::min(step, s.n_ctx) : step;
}

void ModelBackends::join_group(SessionParams& p) const {
  Collective* c = world ? world : comms.empty() ? nullptr : comms[0].get();
  if (!c) return;
  p.tp = {c->rank(), c->size(), c, row_parallel};
  p.peers.clear();
  for (size_t r = 1; r < comms.size(); ++r) p.peers.push_back({peer_backends[r - 1].get(), comms[r].get()});
}

std::vector<std::string> cpu_expert_overrides(const Model& m, bool cpu_moe, int n_cpu_moe) {
  if (m.hparams().n_expert == 0) return {};
  if (cpu_moe) return {"\\.ffn_(gate|up|down)_exps\\.=CPU"};
  const int64_t n = std::min<int64_t>(n_cpu_moe, m.hparams().n_layer);
  if (n <= 0) return {};
  std::string layers;
  for (int64_t i = 0; i < n; ++i) layers += (i ? "|" : "") + std::to_string(i);
  return {"^blk\\.(" + layers + ")\\.ffn_(gate|up|down)_exps\\.=CPU"};
}

std::unique_ptr<Session> make_session(const Model& m, const ModelBackends& b, const RuntimeSpec& spec,
                                      const std::string& ctx_flag) {
  const HParams& h = m.hparams();
  SessionParams p;
  p.n_ctx = spec.n_ctx;
  p.n_batch = step_tokens(spec);
  p.kv_type = spec.kv_type;
  p.n_seq = spec.n_seq;
  p.max_graphs = spec.max_graphs;
  p.stop = spec.stop_steps ? spec.stop : nullptr;
  b.join_group(p);
  const std::string need = gib(KVCache::bytes_for(h, p.kv_type, p.n_ctx, h.n_layer));
  auto refuse = [&](const std::string& why) {
    return Error("a context of " + std::to_string(p.n_ctx) + " tokens (" + ctx_flag + "): the KV cache needs " + need +
                 why + "; lower " + ctx_flag);
  };
  try {
    auto s = std::make_unique<Session>(m, *b.backend, p);
    if (h.n_ctx_train > 0 && p.n_ctx > h.n_ctx_train)
      warn("a context of " + std::to_string(p.n_ctx) + " tokens (" + ctx_flag + ") is more than the " +
           std::to_string(h.n_ctx_train) + " tokens the model was trained for (" + h.arch +
           ".context_length); expect degraded output past it");
    return s;
  } catch (const std::bad_alloc&) {
    throw refuse(", more memory than there is");
  } catch (const Error& e) {
    if (std::string(e.what()).rfind("kv cache:", 0) != 0) throw;
    throw refuse(std::string(" (") + e.what() + ")");
  }
}

Runtime::~Runtime() = default;  // members in reverse: the session, the backends (weights first), the model

Runtime& Runtime::operator=(Runtime&& o) noexcept {
  if (this != &o) {
    this->~Runtime();  // a member-wise move would free the model before the session that reads it
    new (this) Runtime(std::move(o));
  }
  return *this;
}

Runtime build_runtime(const RuntimeSpec& spec) {
  if (spec.model_path.empty()) throw UsageError("no model given (-m MODEL.gguf)");
  Runtime r;
  const auto t0 = std::chrono::steady_clock::now();
  r.model = Model::load(spec.model_path);
  r.model_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  RuntimeSpec s = spec;
  if (s.n_ctx_at_most_trained && r.model->hparams().n_ctx_train > 0)
    s.n_ctx = std::min(s.n_ctx, r.model->hparams().n_ctx_train);
  if (!r.model->hparams().causal && s.n_ctx > 0) {
    // A non-causal model sees a whole sequence in one step: a step takes
    // the context.
    s.n_batch = std::max(s.n_batch, s.n_ctx);
    s.n_ubatch = std::max(s.n_ubatch, s.n_ctx);
  }
  r.backends = make_backends(*r.model, s);
  if (s.n_ctx > 0) r.session = make_session(*r.model, r.backends, s);
  return r;
}

}  // namespace weir
