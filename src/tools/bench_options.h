// The command line of `weir bench`, llama-bench's options where weir has the
// feature: list options (-m, -p, -n, -d, -b, -ub, -t) expand to the cross
// product of their values.
#pragma once
#include <string>
#include <vector>

#include "core/dtype.h"
#include "engine/bench.h"

namespace weir::tools {

struct BenchOptions {
  BenchPlan plan;
  int reps = 5;
  std::string output = "md";  // md, csv, json, jsonl
  bool warmup = true;
  DType kv_type = DType::F16;  // -ctk / -ctv (weir's cache has one type for both)
  // --device: the GPU of the -ngl > 0 tests.
  int device = 0;
  // off, distribute or isolate: CpuOptions::numa of every test's backend.
  std::string numa = "off";
  // Op offload (products of big batches of the CPU's weights on the GPU).
  bool op_offload = true;
  // Loading: -mmp 0 reads the CPU's weights into memory; --direct-io.
  bool mmap = true, direct_io = false;
  int tp = 1;  // --tp: tensor parallel ranks (CPU ranks splitting -t, or GPUs with -ngl 99)
  std::string split_mode = "auto";  // -sm: none, layer, tensor (GPUs from --device on)
  std::string tensor_split;         // -ts
  bool cpu_moe = false;             // --cpu-moe: expert weights on the CPU
  int n_cpu_moe = 0;                // --n-cpu-moe N: those of the first N layers
  bool default_batch() const { return plan.n_batch == std::vector<int>{2048}; }
  bool default_ubatch() const { return plan.n_ubatch == std::vector<int>{512}; }
};

// Parses the arguments after `bench`; false when --help was printed. Throws
// UsageError for bad values (naming the flag).
bool parse_bench_options(int argc, char** argv, BenchOptions* o);

}  // namespace weir::tools
