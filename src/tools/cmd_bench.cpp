// weir bench: llama-bench's tests and tables, plus what weir adds: model
// load time, the bytes a decoded token reads, and the memory bandwidth each
// tg result achieves next to the bandwidth this machine measures.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>

#include "backend/cpu/membw.h"
#include "backend/registry.h"
#include "core/error.h"
#include "engine/bench.h"
#include "engine/session.h"
#include "engine/spec_setup.h"
#include "model/model_desc.h"
#include "sched/scheduler.h"
#include "backend/cpu/kernel_choice.h"
#include "tools/bench_format.h"
#include "tools/bench_options.h"
#include "tools/commands.h"
#include "tools/common.h"
#include "tools/env_options.h"
#include "tools/mpi_ranks.h"
#include "tools/signals.h"

namespace weir::tools {
namespace {

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<BenchModelInfo> info;
  // --spec: the proposer (a draft model's runtime with it), made at the
  // first test that needs one; --spec-file's tokens in this model's
  // vocabulary.
  std::unique_ptr<SpecSetup> spec;
  std::vector<int32_t> context;
  // The backends of its -ngl > 0 tests by (-ngl, threads), weights on the
  // device: made once, kept for every test that uses them.
  std::map<std::pair<int, int>, ModelBackends> gpu;
};

// "17", or "auto" for --fit's tests.
std::string ngl_text(int ngl) { return ngl == kNglAuto ? "auto" : std::to_string(ngl); }

// Whether test t's backends hold a GPU (some layers there, --fit with a GPU,
// or op offload): those are made once and kept.
bool holds_gpu(const BenchTest& t, const BenchOptions& o) {
  static const bool have_gpu = !cuda_devices().empty();
  return t.n_gpu_layers > 0 || (have_gpu && (t.n_gpu_layers == kNglAuto || !o.runtime.no_op_offload));
}

// Loads a model and times what a user waits for before the first token can
// be computed: open + mmap + metadata and tokenizer, the backend (its
// threads; on a GPU, the weights copied there), the KV cache, and the first
// decode graph built and planned. A GPU backend is kept for the model's
// tests (copying the weights again per test would only repeat the load).
LoadedModel load_for_bench(const std::string& path, const BenchTest& first, const BenchOptions& o, int64_t n_ctx) {
  LoadedModel lm;
  const auto t0 = std::chrono::steady_clock::now();
  lm.model = load_model(path);
  {
    const RuntimeSpec spec = o.spec_for(first, n_ctx);
    ModelBackends c = make_backends(*lm.model, spec);
    if (c.load.bytes)
      std::fprintf(stderr, "weir bench: %s: weights loaded: %s\n", path.c_str(), c.load.summary().c_str());
    make_session(*lm.model, c, spec, "-p + -n + -d, times -np")->prepare(1);
    if (holds_gpu(first, o) || c.split) {
      std::fprintf(stderr, "weir bench: -ngl %s: %s\n", ngl_text(first.n_gpu_layers).c_str(), c.placement.c_str());
      lm.gpu.emplace(std::make_pair(first.n_gpu_layers, first.n_threads), std::move(c));
    }
  }
  lm.info = std::make_unique<BenchModelInfo>();
  lm.info->load_ms = seconds_since(t0) * 1e3;
  lm.info->path = path;
  lm.info->description = model_description(lm.model->file());
  lm.info->size_bytes = lm.model->weight_bytes();
  lm.info->n_params = lm.model->n_params();
  lm.info->weight_bytes_per_token = decode_weight_bytes(lm.model->file());
  return lm;
}

void emit(const std::string& s) { write_stdout(s); }

template <class... A>
std::string printf_text(const char* f, A... a) {
  char buf[512];
  std::snprintf(buf, sizeof buf, f, a...);
  return buf;
}

// --verify-curve: the cost of a step checking k guesses for k = 0 .. K,
// against plain decoding's token, and the speedup it allows at a few
// acceptance rates (n-gram lookup: no draft time added).
std::string verify_curve_text(const Model& m, Backend& b, const BenchTest& t, const BenchRunOptions& ro,
                              const BenchOptions& o) {
  const int depth = t.n_depth;
  const VerifyCurve c = measure_verify_curve(m, b, o.verify_curve, depth, ro);
  std::string s = printf_text("\nverify-step cost, %s (%s, -ngl %s, depth %d): a step checking k guesses (k + 1 tokens, one host wait), median of %d\n",
                      m.file().name().c_str(), t.n_gpu_layers > 0 ? "GPU" : "CPU", ngl_text(t.n_gpu_layers).c_str(),
                      depth, std::max(3, o.reps));
  s += printf_text("plain decoding (tg, pipelined): %.3f ms a token\n\n", c.plain_ms);
  s += "|  k | step ms | x plain token | speedup at 0.5 | at 0.7 | at 0.9 |\n|---:|---:|---:|---:|---:|---:|\n";
  for (int k = 0; k < int(c.step_ms.size()); ++k)
    s += printf_text("| %2d | %.3f | %.2f | %.2f | %.2f | %.2f |\n", k, c.step_ms[size_t(k)], c.step_ms[size_t(k)] / c.plain_ms,
             c.speedup(k, 0.5), c.speedup(k, 0.7), c.speedup(k, 0.9));
  for (const double a : {0.5, 0.7, 0.9}) {
    const int k = c.best_k(a);
    s += printf_text("at acceptance %.1f: best k %d, %.2f tokens a step, %.2fx plain decoding's t/s\n", a, k,
             DraftLength::expected_tokens(a, k), c.speedup(k, a));
  }
  return s;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  BenchOptions o;
  if (!parse_bench_options(argc, argv, &o)) return 0;
  BenchEnv env;
  env.cpu_info = cpu_model_name();
  env.cpu_kernels = cpu::describe_cpu_kernels(cpu_options_from_env().repack);
  env.type_kv = dtype_name(o.kv_type);  // ggml's names: f16, f32, q8_0
  env.numa = o.runtime.numa;
  env.show_n_batch = !o.default_batch();
  env.show_n_ubatch = !o.default_ubatch();
  std::vector<BenchTest> tests = expand_tests(o.plan);
  for (const BenchTest& t : tests) {
    env.show_ngl = env.show_ngl || t.n_gpu_layers > 0 || (t.n_gpu_layers == kNglAuto && !cuda_devices().empty());
    env.show_spec = env.show_spec || !t.spec.empty();
  }
  // --spec-file: tg tests of one free sequence begin after its tokens.
  std::map<std::string, std::vector<int32_t>> contexts;
  if (!o.spec_text.empty())
    for (BenchTest& t : tests) {
      if (t.n_gen <= 0 || t.n_prompt > 0 || t.n_parallel > 1 || !t.json_schema.empty()) continue;
      if (!contexts.count(t.model)) {
        const auto m = load_model(t.model);
        contexts[t.model] = m->tokenizer().encode(o.spec_text, m->tokenizer().vocab().add_bos, true);
      }
      t.n_depth = int(contexts[t.model].size());
    }
  const int device = o.runtime.main_gpu >= 0 ? o.runtime.main_gpu : o.runtime.devices[0];
  if (env.show_ngl) env.gpu_info = gpu_name(device);
  // Every model opens before anything is printed: a path that is not a model
  // is an error, not a table (or a JSON array) cut short.
  for (const std::string& path : o.plan.models) (void)load_model(path);
  auto printer = make_bench_printer(o.output, env);

  std::map<std::string, int64_t> max_ctx;  // per model: the largest context a test needs
  for (const BenchTest& t : tests)
    max_ctx[t.model] = std::max(max_ctx[t.model], t.n_ctx());

  emit(printer->header());
  std::vector<LoadedModel> models;  // kept: rows point at their info
  std::map<int, double> read_bw;    // threads -> bytes/s (-1: the GPU's)
  std::vector<BenchRow> rows;
  std::vector<std::string> curves;  // --verify-curve's tables
  BenchRunOptions ro;
  ro.reps = o.reps;
  ro.warmup = o.warmup;
  ro.kv_type = o.kv_type;
  ro.stop = &stop_flag();
  ro.pipelined = pipeline_from_env();
  // A test that fails after the header went out still closes the table (a
  // JSON array stays valid JSON), then the error ends the command.
  try {
    for (const BenchTest& t : tests) {
      if (stop_requested()) break;
      if (models.empty() || models.back().info->path != t.model) {
        models.push_back(load_for_bench(t.model, t, o, max_ctx[t.model]));
        if (contexts.count(t.model)) models.back().context = contexts[t.model];
      }
      LoadedModel& lm = models.back();
      // Backends that hold a GPU are made once and kept (holds_gpu);
      // CPU-only ones fresh per test.
      const bool gpu = holds_gpu(t, o);
      const auto key = std::make_pair(t.n_gpu_layers, t.n_threads);
      const RuntimeSpec spec = o.spec_for(t, max_ctx[t.model]);
      if (gpu && !lm.gpu.count(key)) {
        ModelBackends c = make_backends(*lm.model, spec);
        const std::string ngl = ngl_text(t.n_gpu_layers);
        std::fprintf(stderr, "weir bench: -ngl %s: %s\n", ngl.c_str(), c.placement.c_str());
        if (c.load.bytes) std::fprintf(stderr, "weir bench: -ngl %s: weights loaded: %s\n", ngl.c_str(), c.load.summary().c_str());
        lm.gpu.emplace(key, std::move(c));
      }
      ModelBackends cpu;  // fresh per test: no plans or threads carried over
      if (!gpu) cpu = make_backends(*lm.model, spec);
      const ModelBackends& choice = gpu ? lm.gpu.at(key) : cpu;
      // -ngl auto: the layers --fit chose (the ngl column shows them).
      const int ngl = t.n_gpu_layers == kNglAuto ? choice.fit.n_gpu_layers : t.n_gpu_layers;
      BenchRow row;
      if (t.n_gen > 0) {
        // All on the GPU: its bandwidth; split or CPU: the CPU's (the slower part).
        const bool all_gpu = ngl > lm.model->hparams().n_layer && !lm.gpu.empty();
        const int bw_key = all_gpu ? -1 : t.n_threads;
        if (!read_bw.count(bw_key))
          read_bw[bw_key] =
              all_gpu ? measure_gpu_bandwidth(mpi_world() ? device + mpi_local_rank() : device)  // this process's GPU
                      : cpu::measure_read_bandwidth(t.n_threads).bytes_per_s;
        row.mem_read_bps = read_bw[bw_key];
        // Token k of the test attends to depth + prompt + k + 1 cells; use the
        // mean. Batched decode reads the weights once for all its sequences.
        const int64_t ctx = int64_t(t.n_depth) + t.n_prompt + (t.n_gen + 1) / 2;
        row.kv_bytes_per_token = decode_kv_bytes(lm.model->hparams(), o.kv_type, ctx);
        row.bytes_per_token = lm.info->weight_bytes_per_token / uint64_t(std::max(1, t.n_parallel)) +
                              row.kv_bytes_per_token;
      }
      sched::Scheduler* split = choice.split;
      if (split) split->reset_profile();
      BenchRunOptions tro = ro;
      SessionParams group;
      choice.join_group(group);
      tro.tp = group.tp;
      tro.peers = group.peers;
      if (t.n_depth > 0 && t.n_depth == int(lm.context.size()) && t.n_prompt == 0 && t.n_parallel == 1 &&
          t.json_schema.empty())
        tro.context = lm.context;
      if (!t.spec.empty() && t.spec != "off") {
        if (!lm.spec) {
          SpecOptions so = o.spec;
          so.mode = t.spec == "draft" ? SpecMode::Draft : SpecMode::Ngram;
          lm.spec = std::make_unique<SpecSetup>(make_spec(so, spec, *lm.model, max_ctx[t.model]));
        } else if ((t.spec == "draft") != (lm.spec->options.mode == SpecMode::Draft)) {
          SpecOptions so = o.spec;
          so.mode = t.spec == "draft" ? SpecMode::Draft : SpecMode::Ngram;
          lm.spec = std::make_unique<SpecSetup>(make_spec(so, spec, *lm.model, max_ctx[t.model]));
        }
        tro.proposer = lm.spec->proposer.get();
      }
      tro.draft_length = o.spec.length;
      try {
        row.result = run_bench_test(*lm.model, *choice.backend, t, tro);
      } catch (const Cancelled&) {
        break;  // the rows so far, then the footer
      }
      row.result.test.n_gpu_layers = ngl;
      row.model = lm.info.get();
      emit(printer->row(row));
      if (split && split->profile().steps && spec.profile)
        std::fprintf(stderr, "weir bench: %s -ngl %s: %s\n", t.name().c_str(), ngl_text(t.n_gpu_layers).c_str(),
                     split->profile().describe().c_str());
      rows.push_back(std::move(row));
      // --verify-curve: after a model's last test, on that test's backends.
      const bool last_of_model = &t == &tests.back() || (&t + 1)->model != t.model;
      if (o.verify_curve > 0 && last_of_model)
        curves.push_back(verify_curve_text(*lm.model, *choice.backend, t, tro, o));
    }
  } catch (...) {
    emit(printer->footer(rows));
    throw;
  }
  emit(printer->footer(rows));
  for (const std::string& c : curves) {
    if (o.output == "md") emit(c);
    else std::fputs(c.c_str(), stderr);
  }
  if (stop_requested()) {
    std::fprintf(stderr, "weir bench: interrupted (%s) after %zu of %zu tests\n", stop_signal_name(), rows.size(),
                 tests.size());
    return stop_exit_code();
  }
  return 0;
}

}  // namespace weir::tools
