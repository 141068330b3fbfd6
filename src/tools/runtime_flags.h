// The flags of everything that decides where and how a model runs, one set
// for every command that runs one (run, chat, perplexity, serve, bench):
// placement, KV cache and steps, threads, loading. Same names (llama.cpp's
// spelling where it has one), same defaults, same help text; RuntimeFlags
// turns them, with the environment's WEIR_* knobs, into the RuntimeSpec
// that engine/runtime.h builds.
//
// bench takes lists where llama-bench does (-ngl, -t, -b, -ub: every
// combination is a test); the other commands take one value of each.
#pragma once
#include <string>
#include <vector>

#include "engine/runtime.h"
#include "tools/args.h"

namespace weir::tools {

struct RuntimeFlags {
  // What differs between commands: the context's default and meaning, and
  // whether list flags may hold several values.
  struct Defaults {
    int64_t n_ctx = 4096;
    std::string ctx_help = "context size in tokens (default 4096, or the model's if smaller)";
    bool n_ctx_at_most_trained = true;  // an -c not given is at most the model's context_length
    bool lists = false;                 // bench: -ngl, -t, -b, -ub take lists; -c 0 means "as each test needs"
    bool kv_f16 = false;                // bench: the cache f16 unless -ctk says (llama-bench's default)
  };

  // As given (lists hold one value outside bench); -ngl auto and --fit are
  // kNglAuto in n_gpu_layers (after parsed()).
  std::vector<int> n_gpu_layers = {0}, threads, n_batch = {2048}, n_ubatch = {512};
  bool fit = false;
  uint64_t fit_vram = 0;  // --fit-vram in bytes (0: not given)
  int threads_batch = 0;
  std::vector<std::string> overrides;
  std::vector<int> devices = {0};
  int main_gpu = -1;  // -1: not given
  std::string split_mode = "auto", tensor_split;
  bool cpu_moe = false;
  int n_cpu_moe = 0;
  int tp = 1;
  bool no_op_offload = false;
  int64_t n_ctx = 0;
  std::string cache_type_k, cache_type_v, flash_attn = "auto", numa = "off";
  bool no_mmap = false, direct_io = false;

  RuntimeFlags();
  void add_to(Args& a, const Defaults& d);
  // After Args::parse: notes which flags were given (--device, -mg, -c),
  // reads -ngl's values (auto: kNglAuto) and --fit, --fit-vram (UsageError
  // naming the flag for a bad value or a clash).
  void parsed(const Args& a);
  // The spec for one run with -ngl n_gpu_layers[0], -t threads[0] ...
  // (after parsed()). Checks every flag (UsageError naming it) and reads the
  // environment's WEIR_* knobs into the options.
  RuntimeSpec spec(const std::string& model_path) const;
  // bench: the spec of one test's -ngl, -t, -b, -ub.
  RuntimeSpec spec_for(const std::string& model_path, int ngl, int threads, int batch, int ubatch) const;
  // The KV cache type with -ngl n (-ctk, else the default; auto counts as
  // layers on the GPU).
  DType kv_type(int n_gpu_layers) const;
  // --device or -mg with -ngl 0 (and no -ot rule for a GPU) would be
  // silently ignored: a UsageError says so.
  void check_gpu_choice(int n_gpu_layers) const;

 private:
  Defaults d_;
  bool device_given_ = false, ctx_given_ = false;
  std::vector<std::string> ngl_text_;  // -ngl as given: numbers, ranges, auto
  std::string fit_vram_text_;
};

// Every runtime flag's names, in the order help lists them (for the test that
// every command takes the same set).
std::vector<std::string> runtime_flag_names();

// The KV cache type a -ctk / -ctv value names (f32, f16, q8_0); UsageError
// naming the flag otherwise.
DType parse_kv_type(const std::string& flag, const std::string& s);

}  // namespace weir::tools
