// Pieces shared by the subcommands: loading a model with timing, the default
// thread count, checks of common flags, reading text files, writing stdout.
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "model/loader.h"
#include "model/model.h"
#include "sched/scheduler.h"
#include "text/chat_template.h"
#include "tools/args.h"

namespace weir::tools {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Physical-core-ish default: all online CPUs (hyper-threads help little but
// the CI machine has 2 vCPUs and no SMT siblings).
int default_threads();

// Loads a model and reports the time to stderr; errors name the path.
std::unique_ptr<Model> load_model(const std::string& path, double* seconds = nullptr);

// --numa MODE for the CPU backend (off | distribute | isolate); throws a
// UsageError naming the flag for anything else.
cpu::NumaMode parse_numa_flag(const std::string& s);
// After the first graph is planned: the plan and where weights went, on
// stderr (nothing when NUMA is off).
void report_numa(const Backend& b);

// Where a model runs, as the flags ask: -ngl N (the last N layers on the
// GPU --device D, the output head too when N > the layer count), -ot
// REGEX=DEV overrides, op offload (products of big batches of CPU-resident
// layers on the GPU).
// Threads reading weights: all CPUs up to 8 (a warm page cache reads at
// ~3-8 GB/s a thread; on the H200 host 8 loaded the 8B Q4_K_M faster than
// 16, whose staging buffers cost more to pin than they saved).
int default_load_threads();

struct BackendFlags {
  int n_gpu_layers = 0;
  int device = 0;
  int threads = 1;
  CpuOptions cpu;
  std::vector<std::string> overrides;  // -ot, as given
  bool op_offload = true;
  // For the check that the GPU's share fits: the context the KV cache holds.
  int64_t n_ctx = 4096;
  DType kv_type = DType::F32;
  // Where a split step's time goes (WEIR_SCHED_PROFILE=1; bench prints it).
  bool profile = false;
  // Loading (model/loader.h): --no-mmap reads the CPU's weights into memory,
  // --direct-io reads around the page cache; threads reading the file.
  bool no_mmap = false, direct_io = false;
  // --tp N: tensor parallel over N ranks (model/shard.h): N CPU ranks
  // splitting the threads (-ngl 0), or N GPUs (-ngl 99).
  int tp = 1;
  // Several GPUs: --device 0,1 (empty: `device` alone), -sm none | layer |
  // tensor (auto: layer when the model does not fit one GPU), and
  // --tensor-split's shares of the layers.
  std::vector<int> devices;
  std::string split_mode = "auto";
  std::vector<double> tensor_split;
  // Mixture of experts: --cpu-moe keeps every layer's expert weights in CPU
  // memory (their products run there), --n-cpu-moe N those of the first N
  // layers, as llama.cpp spells them (both are -ot rules on *_exps).
  bool cpu_moe = false;
  int n_cpu_moe = 0;
  int load_threads = default_load_threads();
  size_t load_buffer_bytes = size_t(4) << 20;  // each pinned staging buffer (WEIR_LOAD_BUFFER_MB)
};

struct BackendChoice {
  std::unique_ptr<Backend> backend;
  // Tensor parallelism (--tp N): the other ranks' backends (`backend` is
  // rank 0's) and every rank's end of the group's collectives.
  std::vector<std::unique_ptr<Backend>> peer_backends;
  std::vector<std::unique_ptr<Collective>> comms;
  Collective* world = nullptr;  // under mpirun: the processes' group (this process one rank)
  std::string placement;             // bytes per device and what runs there (for -v and bench)
  sched::Scheduler* split = nullptr;  // the backend, when it is a scheduler over several
  // The weights loaded to devices (and with --no-mmap into memory): after
  // every backend, so that it goes first and the backends forget them.
  LoadedWeights weights;
  LoadReport load;  // what loading took (weights.report() and the --no-mmap reads)
  // Puts p in the tensor-parallel group (nothing without --tp).
  void join_group(SessionParams& p) const;
};

// The backend for these flags: the CPU, one GPU, or a scheduler over both.
// Errors name the flag: no GPU, an unknown device, a bad -ot, a GPU share
// that does not fit (bytes needed vs free). The CPU backend stops between
// graph segments on a stop signal.
BackendChoice make_backend(const Model& m, const BackendFlags& f);
// The -ot rules that keep expert weights on the CPU: every layer's
// (cpu_moe), or those of layers [0, n_cpu_moe); none for a dense model.
std::vector<std::string> cpu_expert_overrides(const Model& m, bool cpu_moe, int n_cpu_moe);
// --temp, --top-k, --top-p, --min-p (run and chat).
void add_sampling_flags(Args& a, SamplerParams* sp);
// UsageError naming the sampling flag out of range.
void check_sampling(const SamplerParams& sp);
// The sampler flags' values for sampling on the backend, with this seed.
BackendSampling backend_sampling(const SamplerParams& sp, uint64_t seed);
// --chat-template-file's template when given, else the model's own or a
// built-in one (ChatTemplate::for_model; throws Error when there is none).
ChatTemplate chat_template_for(const Model& m, const std::string& template_file);
// The GPU flags of run, perplexity and serve, as given: --device 0[,1...],
// -sm, -ts, --cpu-moe, --n-cpu-moe; apply() checks them into BackendFlags.
struct GpuFlags {
  std::vector<int> devices = {0};
  std::string split_mode = "auto";
  std::string tensor_split;
  bool cpu_moe = false;  // --cpu-moe, --n-cpu-moe N (BackendFlags)
  int n_cpu_moe = 0;
  void add_to(Args& a);
  void apply(BackendFlags& f) const;
};

// A progress bar for a load, on stderr when it is a terminal and the load
// takes over a second (bytes, GB/s, time left); nothing otherwise.
std::function<void(const LoadProgress&)> load_progress_bar();

// Whether any layer goes to a GPU with these flags.
bool wants_gpu(const Model& m, int n_gpu_layers);

// -ctk / -ctv: the KV cache's type, f32, f16 or q8_0 (8-bit blocks: about
// half of f16's memory and bytes read a token). weir's cache has one type
// for both, so -ctv, when given, must equal -ctk.
struct KvFlags {
  std::string k, v;
  // default_type: the help's word for what an empty flag means (by default
  // serving_kv_type's choice).
  void add_to(Args& a,
              const std::string& default_type =
                  "f16 with -ngl (the GPUs' attention kernels' type), f32 on the CPU (faster there)");
  // The type asked for, or fallback when neither flag was given.
  DType resolve(DType fallback) const;
};

// The KV cache type a session takes by default (run, chat, perplexity,
// serve, Python): F16 where layers run on a GPU (its attention kernels'
// type: H100 tg128 8B Q4_K_M +6% at depth 0 and +9% at 4,096 over F32), F32
// on the CPU (faster there).
DType serving_kv_type(int n_gpu_layers);

// A Session on this backend; memory the KV cache cannot get is an error that
// says how much the context (--ctx-size) asked for and to lower it. Sets p.stop to the stop
// flag (signals.h).
// ctx_flags: the flags that set the context, for the message.
std::unique_ptr<Session> make_session(const Model& m, Backend& b, SessionParams p,
                                      const std::string& ctx_flags = "--ctx-size");
// The first non-finite value of a row of logits, or -1 when all are finite.
int64_t first_non_finite(const float* logits, int64_t n);

// "NVIDIA H100 80GB HBM3" for --device d, or "" when there is none.
std::string gpu_name(int device);

// --threads: at least 1 and at most kMaxThreads (more would only fail to
// start, or crawl); a UsageError names the flag.
constexpr int kMaxThreads = 1024;
void check_threads(int threads, const std::string& flag = "--threads");
// --device without -ngl would be silently ignored: a UsageError says so.
void check_device_flag(bool device_given, int n_gpu_layers);

// The text of a prompt or text file given by `flag` (-f): a regular file, a
// pipe or a terminal (/dev/stdin, <(cmd)); a directory, a missing or
// unreadable file, or more than kMaxTextBytes is an error naming the flag
// and path. A FIFO with no writer reads as empty, never blocks forever.
constexpr size_t kMaxTextBytes = size_t(1) << 30;
std::string read_text_file(const std::string& path, const std::string& flag);

// Writes to stdout; a failed write (a full disk, a closed pipe) throws an
// Error naming standard output.
void write_stdout(const void* data, size_t n);
inline void write_stdout(const std::string& s) { write_stdout(s.data(), s.size()); }

}  // namespace weir::tools
