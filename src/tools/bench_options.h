// The command line of `weir bench`, llama-bench's options where weir has the
// feature: list options (-m, -p, -n, -d, -b, -ub, -t) expand to the cross
// product of their values.
#pragma once
#include <string>
#include <vector>

#include "core/dtype.h"
#include "engine/bench.h"
#include "engine/spec_options.h"
#include "tools/runtime_flags.h"

namespace weir::tools {

struct BenchOptions {
  BenchPlan plan;  // its -ngl, -t, -b, -ub lists are the runtime flags'
  int reps = 5;
  std::string output = "md";  // md, csv, json, jsonl
  bool warmup = true;
  // The placement, cache, loader and thread flags every command takes
  // (runtime_flags.h); a test's spec is runtime.spec_for(its values).
  RuntimeFlags runtime;
  DType kv_type = DType::F16;  // -ctk (f16 unless given, as llama-bench)
  // Speculative decoding (tg tests): --spec's list is plan.spec; -md,
  // -ngld, --draft-max, --draft-min here (mode: draft when the list has it).
  SpecOptions spec;
  std::string spec_text;  // --spec-file: the text tg tests start from (untimed), "" none
  int verify_curve = 0;   // --verify-curve K: each model's verify-step cost for k = 0 .. K (0: none)
  bool default_batch() const { return plan.n_batch == std::vector<int>{2048}; }
  bool default_ubatch() const { return plan.n_ubatch == std::vector<int>{512}; }
  // The spec of test t, its context n_ctx cells (0: none is made).
  RuntimeSpec spec_for(const BenchTest& t, int64_t n_ctx) const;
};

// Parses the arguments after `bench`; false when --help was printed. Throws
// UsageError for bad values (naming the flag).
bool parse_bench_options(int argc, char** argv, BenchOptions* o);

}  // namespace weir::tools
