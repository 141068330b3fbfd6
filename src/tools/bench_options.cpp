#include "tools/bench_options.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "tools/args.h"
#include "tools/common.h"
#include "tools/runtime_flags.h"
#include "tools/spec_flags.h"

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

// --json-schema's list: none, object, or schema files, comma-separated.
std::vector<std::pair<std::string, std::string>> json_schema_list(const std::string& list) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, comma - at);
    at = comma + 1;
    if (item == "none") {
      out.emplace_back("", "");
    } else if (item == "object") {
      out.emplace_back("object", "object");
    } else {
      std::ifstream f(item);
      if (!f) throw UsageError("--json-schema: cannot read '" + item + "' (give none, object or schema files)");
      std::stringstream text;
      text << f.rdbuf();
      const size_t slash = item.find_last_of('/');
      out.emplace_back(slash == std::string::npos ? item : item.substr(slash + 1), text.str());
    }
  }
  return out;
}

}  // namespace

bool parse_bench_options(int argc, char** argv, BenchOptions* o) {
  std::string json_schemas;
  bool no_warmup = false;
  int mmap = 1;
  RuntimeFlags& rf = o->runtime;
  RuntimeFlags::Defaults d;
  d.n_ctx = 0;
  d.ctx_help = "KV cache cells of every test (default 0: what each test needs, -p + -n + -d, times -np)";
  d.n_ctx_at_most_trained = false;
  d.lists = true;
  d.kv_f16 = true;
  Args a("bench",
         "Measure prompt processing (pp) and generation (tg) speed, llama-bench style.\n"
         "List options take N,M,..., FIRST-LAST[+STEP|*MULT], or repeats; every combination is run.");
  a.opt_list("-m,--model", &o->plan.models, "FILE", "GGUF model(s) (required)")
      .opt_list("-p,--n-prompt", &o->plan.n_prompt, "N", "prompt tokens of the pp tests (default 512; 0: none)")
      .opt_list("-n,--n-gen", &o->plan.n_gen, "N", "generated tokens of the tg tests (default 128; 0: none)")
      .opt_list("-d,--n-depth", &o->plan.n_depth, "N", "tokens in the context before each test (default 0)")
      .opt_list("-np,--parallel", &o->plan.n_parallel, "N",
                "N sequences at once, t/s counting all of them (default 1): tg, N decoded side by side; pp, N prompts through steps of the batch size, one after another")
      .opt("--json-schema", &json_schemas, "LIST",
           "tg tests: each also under a grammar, every sequence's tokens constrained to JSON: none (no grammar), "
           "object (any object) or a JSON schema file; comma-separated (default none)")
      .opt("-r,--repetitions", &o->reps, "N", "repetitions of each test (default 5)")
      .opt("-o,--output", &o->output, "FMT", "md, csv, json or jsonl (default md)")
      .flag("--no-warmup", &no_warmup, "skip the untimed warm-up run before each test")
      .opt("-mmp,--mmap", &mmap, "0|1", "llama-bench's spelling of --no-mmap: 1 maps the file (default), 0 reads the CPU's weights into memory");
  rf.add_to(a, d);
  SpecFlags specf;
  specf.add_to(a);
  std::string spec_file;
  a.opt("--spec-file", &spec_file, "FILE",
        "tg tests begin after this text (untimed, in place of -d): a text the answer repeats, for --spec ngram")
      .opt("--verify-curve", &o->verify_curve, "K",
           "after the tests, what a step checking k guesses costs for k = 0 .. K on each model (speculative decoding)");
  if (!a.parse(argc, argv)) return false;
  // --spec takes a list here: each value a tg test.
  if (!specf.mode.empty()) {
    o->plan.spec.clear();
    size_t at = 0;
    while (at <= specf.mode.size()) {
      const size_t comma = std::min(specf.mode.find(',', at), specf.mode.size());
      const std::string m = specf.mode.substr(at, comma - at);
      at = comma + 1;
      if (m != "off" && m != "ngram" && m != "draft") throw UsageError("--spec: expected off, ngram or draft (comma-separated), got '" + m + "'");
      o->plan.spec.push_back(m);
    }
  } else if (!specf.draft_path.empty()) {
    o->plan.spec = {"draft"};
  }
  const bool draft = std::count(o->plan.spec.begin(), o->plan.spec.end(), "draft") > 0;
  SpecFlags one = specf;
  one.mode = draft ? "draft" : (o->plan.spec == std::vector<std::string>{""} ? "off" : "ngram");
  o->spec = one.options(a);
  if (!spec_file.empty()) {
    o->spec_text = read_text_file(spec_file, "--spec-file");
    if (o->spec_text.empty()) throw UsageError("--spec-file: " + spec_file + " is empty");
    if (o->plan.n_depth != std::vector<int>{0}) throw UsageError("--spec-file takes the place of -d: give one or the other");
  }
  if (o->verify_curve < 0 || o->verify_curve > DraftLength::kMaxDraft)
    throw UsageError("--verify-curve: expected 1 .. " + std::to_string(DraftLength::kMaxDraft) + " guesses, got " +
                     std::to_string(o->verify_curve));
  rf.parsed(a);
  o->warmup = !no_warmup;
  if (!json_schemas.empty()) o->plan.json_schemas = json_schema_list(json_schemas);
  if (mmap != 0 && mmap != 1) throw UsageError("-mmp: expected 0 or 1, got " + std::to_string(mmap));
  if (mmap == 0) rf.no_mmap = true;
  o->plan.n_gpu_layers = rf.n_gpu_layers;
  o->plan.n_threads = rf.threads;
  o->plan.n_batch = rf.n_batch;
  o->plan.n_ubatch = rf.n_ubatch;
  if (o->plan.models.empty()) throw UsageError("no model given (-m MODEL.gguf)");
  check_all(o->plan.n_prompt, 0, kMaxTokens, "-p");
  check_all(o->plan.n_gen, 0, kMaxTokens, "-n");
  check_all(o->plan.n_depth, 0, kMaxTokens, "-d");
  check_all(o->plan.n_batch, 1, kMaxTokens, "-b");
  check_all(o->plan.n_ubatch, 1, kMaxTokens, "-ub");
  check_all(o->plan.n_threads, 1, kMaxThreads, "-t");
  for (int n : o->plan.n_gpu_layers)  // 0 or more, or auto (--fit)
    if (n != kNglAuto) check_all({n}, 0, 1 << 20, "-ngl");
  check_all(o->plan.n_parallel, 1, 4096, "-np");
  if (o->reps < 1 || o->reps > 10000) throw UsageError("-r: expected 1 to 10000 repetitions, got " + std::to_string(o->reps));
  if (o->output != "md" && o->output != "csv" && o->output != "json" && o->output != "jsonl")
    throw UsageError("-o: expected md, csv, json or jsonl, got '" + o->output + "'");
  if (rf.numa == "disabled") rf.numa = "off";  // llama-bench's word
  o->kv_type = rf.kv_type(0);
  // Every flag checked now, with the first test's values: a bad one is an
  // error before anything is printed.
  const auto& ngl = o->plan.n_gpu_layers;
  const int most_ngl = std::count(ngl.begin(), ngl.end(), kNglAuto) ? kNglAuto : *std::max_element(ngl.begin(), ngl.end());
  rf.check_gpu_choice(most_ngl);
  (void)rf.spec_for("", most_ngl, o->plan.n_threads[0], o->plan.n_batch[0], o->plan.n_ubatch[0]);
  bool any = false;
  for (int p : o->plan.n_prompt) any = any || p > 0;
  for (int n : o->plan.n_gen) any = any || n > 0;
  if (!any) throw UsageError("nothing to run: every -p and -n value is 0");
  double n_tests = double(o->plan.models.size());
  for (const auto* v : {&o->plan.n_batch, &o->plan.n_ubatch, &o->plan.n_threads, &o->plan.n_gpu_layers,
                        &o->plan.n_depth})
    n_tests *= double(v->size());
  n_tests *= double(o->plan.n_prompt.size() * o->plan.n_parallel.size() +
                    o->plan.n_gen.size() * o->plan.n_parallel.size() * o->plan.json_schemas.size() * o->plan.spec.size());
  if (n_tests > kMaxTests)
    throw UsageError("the lists expand to " + std::to_string(uint64_t(n_tests)) + " tests, more than " +
                     std::to_string(kMaxTests) + "; give fewer values");
  return true;
}

RuntimeSpec BenchOptions::spec_for(const BenchTest& t, int64_t n_ctx) const {
  RuntimeSpec s = runtime.spec_for(t.model, t.n_gpu_layers, t.n_threads, t.n_batch, t.n_ubatch);
  // Each --fit line once, however many tests make backends.
  s.note = [](const std::string& line) {
    static std::set<std::string> said;
    if (said.insert(line).second) std::fprintf(stderr, "weir: %s\n", line.c_str());
  };
  s.kv_type = kv_type;
  if (runtime.n_ctx > 0) {
    if (runtime.n_ctx < n_ctx)
      throw UsageError("-c " + std::to_string(runtime.n_ctx) + ": test " + t.name() + " needs " + std::to_string(n_ctx) +
                       " cells (-p + -n + -d, times -np)");
    n_ctx = runtime.n_ctx;
  }
  s.n_ctx = n_ctx;
  return s;
}

}  // namespace weir::tools
