#include "tools/bench_options.h"

#include "tools/args.h"
#include "tools/common.h"

namespace weir::tools {
namespace {

void check_all(const std::vector<int>& v, int lo, int hi, const char* flag) {
  for (int x : v)
    if (x < lo || x > hi)
      throw UsageError(std::string(flag) + ": values must be " + std::to_string(lo) + " to " + std::to_string(hi) +
                       ", got " + std::to_string(x));
}

constexpr int kMaxTokens = 1 << 24;  // -p, -n, -d: 16M tokens is far past any model's context
constexpr int kMaxTests = 100000;

}  // namespace

bool parse_bench_options(int argc, char** argv, BenchOptions* o) {
  o->plan.n_threads = {default_threads()};
  KvFlags kv{"f16", "f16"};  // as llama-bench: each f16 unless given
  bool no_warmup = false, no_op_offload = false;
  int mmap = 1;
  Args a("bench",
         "Measure prompt processing (pp) and generation (tg) speed, llama-bench style.\n"
         "List options take N,M,..., FIRST-LAST[+STEP|*MULT], or repeats; every combination is run.");
  a.opt_list("-m,--model", &o->plan.models, "FILE", "GGUF model(s) (required)")
      .opt_list("-p,--n-prompt", &o->plan.n_prompt, "N", "prompt tokens of the pp tests (default 512; 0: none)")
      .opt_list("-n,--n-gen", &o->plan.n_gen, "N", "generated tokens of the tg tests (default 128; 0: none)")
      .opt_list("-d,--n-depth", &o->plan.n_depth, "N", "tokens in the context before each test (default 0)")
      .opt_list("-b,--batch-size", &o->plan.n_batch, "N", "logical batch size (default 2048)")
      .opt_list("-ub,--ubatch-size", &o->plan.n_ubatch, "N", "physical batch size (default 512)")
      .opt_list("-t,--threads", &o->plan.n_threads, "N", "CPU threads (default: all CPUs)")
      .opt_list("-np,--parallel", &o->plan.n_parallel, "N",
                "tg tests: N sequences decoded at once, t/s counting all of them (default 1)")
      .opt_list("-ngl,--n-gpu-layers", &o->plan.n_gpu_layers, "N", "0: CPU (default); 99: the whole model on the GPU")
      .opt("--device", &o->device, "N", "the GPU of the -ngl tests (default 0)")
      .opt("-r,--repetitions", &o->reps, "N", "repetitions of each test (default 5)")
      .opt("-o,--output", &o->output, "FMT", "md, csv, json or jsonl (default md)")
      .opt("--numa", &o->numa, "MODE", "off (default), distribute or isolate")
      .flag("--no-warmup", &no_warmup, "skip the untimed warm-up run before each test")
      .flag("-nopo,--no-op-offload", &no_op_offload,
            "keep the prompt's products of CPU-resident weights on the CPU (default: on the GPU when there is one)")
      .opt("-mmp,--mmap", &mmap, "0|1", "1: use the CPU's weights from the file mapping (default); 0: read them into memory")
      .flag("-dio,--direct-io", &o->direct_io, "read the weights with O_DIRECT, around the page cache")
      .opt("--tp", &o->tp, "N", "tensor parallel over N ranks (CPU ranks splitting -t, or N GPUs with -ngl 99)")
      .opt("-sm,--split-mode", &o->split_mode, "MODE", "several GPUs (from --device on): layer, tensor or none")
      .opt("-ts,--tensor-split", &o->tensor_split, "A,B...", "-sm layer: the layers' shares per GPU")
      .flag("-cmoe,--cpu-moe", &o->cpu_moe, "mixture of experts: the expert weights on the CPU, their products there")
      .opt("-ncmoe,--n-cpu-moe", &o->n_cpu_moe, "N", "mixture of experts: the expert weights of the first N layers on the CPU");
  kv.add_to(a, "f16");
  if (!a.parse(argc, argv)) return false;
  o->warmup = !no_warmup;
  o->op_offload = !no_op_offload;
  if (mmap != 0 && mmap != 1) throw UsageError("-mmp: expected 0 or 1, got " + std::to_string(mmap));
  o->mmap = mmap == 1;
  if (o->plan.models.empty()) throw UsageError("no model given (-m MODEL.gguf)");
  check_all(o->plan.n_prompt, 0, kMaxTokens, "-p");
  check_all(o->plan.n_gen, 0, kMaxTokens, "-n");
  check_all(o->plan.n_depth, 0, kMaxTokens, "-d");
  check_all(o->plan.n_batch, 1, kMaxTokens, "-b");
  check_all(o->plan.n_ubatch, 1, kMaxTokens, "-ub");
  check_all(o->plan.n_threads, 1, kMaxThreads, "-t");
  check_all(o->plan.n_gpu_layers, 0, 1 << 20, "-ngl");
  check_all(o->plan.n_parallel, 1, 4096, "-np");
  if (o->device < 0) throw UsageError("--device: expected a GPU number >= 0");
  bool any_gpu = false;
  for (int n : o->plan.n_gpu_layers) any_gpu = any_gpu || n > 0;
  check_device_flag(a.given("--device"), any_gpu ? 1 : 0);
  if (o->reps < 1 || o->reps > 10000) throw UsageError("-r: expected 1 to 10000 repetitions, got " + std::to_string(o->reps));
  if (o->output != "md" && o->output != "csv" && o->output != "json" && o->output != "jsonl")
    throw UsageError("-o: expected md, csv, json or jsonl, got '" + o->output + "'");
  if (o->numa == "disabled") o->numa = "off";
  if (o->numa != "off" && o->numa != "distribute" && o->numa != "isolate")
    throw UsageError("--numa: expected off, distribute or isolate, got '" + o->numa + "'");
  o->kv_type = kv.resolve(DType::F16);
  bool any = false;
  for (int p : o->plan.n_prompt) any = any || p > 0;
  for (int n : o->plan.n_gen) any = any || n > 0;
  if (!any) throw UsageError("nothing to run: every -p and -n value is 0");
  double n_tests = double(o->plan.models.size());
  for (const auto* v : {&o->plan.n_batch, &o->plan.n_ubatch, &o->plan.n_threads, &o->plan.n_gpu_layers,
                        &o->plan.n_depth})
    n_tests *= double(v->size());
  n_tests *= double(o->plan.n_prompt.size() + o->plan.n_gen.size() * o->plan.n_parallel.size());
  if (n_tests > kMaxTests)
    throw UsageError("the lists expand to " + std::to_string(uint64_t(n_tests)) + " tests, more than " +
                     std::to_string(kMaxTests) + "; give fewer values");
  return true;
}

}  // namespace weir::tools
