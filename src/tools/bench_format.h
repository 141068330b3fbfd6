// weir bench output in llama-bench's formats: a markdown table with its
// columns and widths, CSV and JSON with its field names (those that apply to
// weir), plus weir's own: load time, bytes per decoded token, achieved and
// measured memory bandwidth. Each printer returns text; the caller writes it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/bench.h"

namespace weir::tools {

// What is printed once per model.
struct BenchModelInfo {
  std::string path;
  std::string description;  // "gemma3 270M Q4_K - Medium"
  uint64_t size_bytes = 0;  // tensor data
  uint64_t n_params = 0;
  double load_ms = 0;       // open + mmap + tokenizer + first decode graph
  uint64_t weight_bytes_per_token = 0;  // decode_weight_bytes
};

// One finished test.
struct BenchRow {
  BenchResult result;
  const BenchModelInfo* model = nullptr;
  // tg tests only (0 otherwise): weights + KV cache at the mean context, and
  // the read bandwidth measured with the test's thread count (bytes/s).
  uint64_t bytes_per_token = 0;
  uint64_t kv_bytes_per_token = 0;
  double mem_read_bps = 0;  // on a GPU: its measured device bandwidth
  double achieved_bps() const { return double(bytes_per_token) * result.avg_ts(); }
  bool on_gpu() const { return result.test.n_gpu_layers > 0; }
  std::string backend() const { return on_gpu() ? "CUDA" : "CPU"; }
};

// Settings every row shares.
struct BenchEnv {
  std::string cpu_info;
  std::string cpu_kernels;  // cpu::describe_cpu_kernels: printed when a test runs on the CPU
  std::string gpu_info;  // the GPU's name when a test runs on one
  std::string type_kv = "f16";
  std::string numa = "off";
  bool show_n_batch = false, show_n_ubatch = false;  // md: non-default values
  bool show_ngl = false;                             // md: some test runs on a GPU
  bool show_spec = false;                            // md: some test has a proposer (--spec)
};

class BenchPrinter {
 public:
  virtual ~BenchPrinter() = default;
  virtual std::string header() { return ""; }
  virtual std::string row(const BenchRow& r) = 0;
  // After all rows; md prints weir's per-model lines here.
  virtual std::string footer(const std::vector<BenchRow>& rows) { return ""; }
};

// format: md, csv, json or jsonl; nullptr for anything else.
std::unique_ptr<BenchPrinter> make_bench_printer(const std::string& format, const BenchEnv& env);

// "241.39 MiB" / "1.50 GiB", "268.10 M" / "6.74 B": llama-bench's size and params.
std::string bench_size_text(uint64_t bytes);
std::string bench_params_text(uint64_t n);

// The CPU's name from /proc/cpuinfo ("AMD EPYC ..."), or "".
std::string cpu_model_name();

}  // namespace weir::tools
