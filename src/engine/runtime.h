// A model ready to run: where its weights go, the backends that run them
// (CPU, GPUs, a scheduler over both, tensor-parallel ranks), its KV cache
// and session. Everything that decides it is one value, RuntimeSpec, and
// one call, build_runtime, makes it so or says in one line why not (the
// flag at fault, or the bytes needed against the bytes free).
//
// tools/ fills the spec from the command line and the environment (the one
// place that reads either: RuntimeFlags), the Python package from its
// arguments; nothing below reads them. The spec's fields name the llama.cpp
// flag they stand for, and errors name it too.
//
// Promise: the same spec gives the same placement and the same numbers,
// whichever front end filled it.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda_options.h"
#include "comm/gpu_comm.h"
#include "core/collective.h"
#include "engine/gpu_fit.h"
#include "engine/session.h"
#include "model/loader.h"
#include "model/model.h"

namespace weir {

namespace sched {
class Scheduler;
}

struct RuntimeSpec {
  std::string model_path;  // -m

  // --- placement ---
  int n_gpu_layers = 0;                  // -ngl: the last N layers on the GPU (more than the layers: the output head too)
  std::vector<int> devices;              // --device 0,1: the GPUs (empty: main_gpu alone, or every one from it for -sm layer|tensor)
  int main_gpu = 0;                      // -mg: the GPU of a one-GPU run, the first of a split
  std::string split_mode = "auto";       // -sm none | layer | tensor; auto: layer when the model does not fit one GPU
  std::vector<double> tensor_split;      // -ts 3,1: a layer split's shares of the layers
  std::vector<std::string> overrides;    // -ot REGEX=DEV, as given, first match wins
  bool cpu_moe = false;                  // --cpu-moe: every layer's expert weights on the CPU
  int n_cpu_moe = 0;                     // --n-cpu-moe N: those of the first N layers
  int tp = 1;                            // --tp N: tensor parallel over N CPU ranks (-ngl 0) or N GPUs
  bool op_offload = true;                // --no-op-offload clears it: big prompt products of CPU weights on the GPU
  bool fit = false;                      // --fit, -ngl auto: n_gpu_layers (MoE: and --n-cpu-moe) chosen from the
                                         // GPU's free memory (engine/gpu_fit.h); n_gpu_layers is ignored
  uint64_t fit_vram = 0;                 // --fit-vram: the most GPU memory the fit may use (0: what is free)

  // --- KV cache and steps ---
  int64_t n_ctx = 4096;                  // -c: KV cache cells (0: no session is made)
  bool n_ctx_at_most_trained = false;    // -c not given: at most the model's context_length
  DType kv_type = DType::F32;            // -ctk / -ctv (default_kv_type)
  bool kv_type_default = false;          // kv_type is default_kv_type's guess for --fit: it follows what the fit chose
  int64_t n_batch = 2048;                // -b: the logical batch
  int64_t n_ubatch = 512;                // -ub: tokens a forward step takes (the step is min(-b, -ub))
  int n_seq = 1;                         // sequences decoded side by side (SessionParams::n_seq)
  int max_graphs = 8;                    // step shapes kept (SessionParams::max_graphs)

  // --- threads and the CPU ---
  int threads = 0;                       // -t (0: every CPU)
  int threads_batch = 0;                 // -tb: weir runs prompt and decode on the same threads (0 or -t)
  CpuOptions cpu;                        // --numa, and the WEIR_* comparison knobs tools/ read

  // --- GPUs ---
  CudaOptions cuda;                      // each GPU's backend gets these, its device set
  GpuCommOptions gpu_comm;               // tensor parallel over GPUs
  bool profile = false;                  // where a split step's time goes (WEIR_SCHED_PROFILE)

  // --- loading ---
  bool no_mmap = false;                  // --no-mmap: the CPU's weights read into memory
  LoaderOptions load;                    // readers, staging buffers, --direct-io, progress

  // --- running ---
  // One-line reports for the user (what --fit chose); tools print them on
  // stderr; empty: none.
  std::function<void(const std::string&)> note;
  const std::atomic<bool>* stop = nullptr;  // a stop signal: loads, steps and the CPU's graphs end with Cancelled
  bool stop_steps = true;  // false: the signal ends loads only (weir serve ends its requests itself)
  // Under mpirun: this process is one rank of `world` (tools/mpi_ranks.h);
  // local_rank picks its GPU when --device does not.
  Collective* world = nullptr;
  int local_rank = 0;
};

// -ngl auto among the -ngl values of tools/ (weir bench's lists): the same
// as --fit (RuntimeSpec::fit).
constexpr int kNglAuto = -1;

// Every CPU, at least 1.
int default_threads();
// Threads reading weights: every CPU up to 8 (a warm page cache reads at
// ~3-8 GB/s a thread; on the H200 host 8 loaded the 8B Q4_K_M faster than
// 16, whose staging buffers cost more to pin than they saved).
int default_load_threads();
// The KV cache type by default: F16 where layers run on a GPU (its attention
// kernels' type: H100 tg128 8B Q4_K_M +6% at depth 0, +9% at 4,096 over
// F32), F32 on the CPU (faster there).
DType default_kv_type(int n_gpu_layers);
// The tokens a forward step takes: min(-b, -ub, -c).
int64_t step_tokens(const RuntimeSpec& s);

// The backends a model runs on, and what it took to put its weights there.
struct ModelBackends {
  std::unique_ptr<Backend> backend;  // rank 0's, or the only one
  // Tensor parallelism (--tp N): the other ranks' backends and every rank's
  // end of the group's collectives.
  std::vector<std::unique_ptr<Backend>> peer_backends;
  std::vector<std::unique_ptr<Collective>> comms;
  Collective* world = nullptr;  // under mpirun: the processes' group (this process one rank)
  // How the ranks' graphs make the products whose input is split: whole
  // rows on CPU ranks (every output one dot product, as one rank computes
  // it: --tp N equals --tp 1 bit for bit), partial sums on GPUs.
  RowParallel row_parallel = RowParallel::PartialSums;
  std::string placement;             // bytes per device and what runs there (for -v and bench)
  // --fit: what it chose (fit.n_gpu_layers is the -ngl it stands for) and
  // its one-line report (empty without --fit).
  FitPlan fit;
  std::string fit_report;
  sched::Scheduler* split = nullptr;  // the backend, when it is a scheduler over several
  // The weights loaded to devices (and with --no-mmap into memory): after
  // every backend, so that it goes first and the backends forget them.
  LoadedWeights weights;
  LoadReport load;  // what loading took (weights.report() and the --no-mmap reads)
  // Puts p in the tensor-parallel group (nothing without --tp).
  void join_group(SessionParams& p) const;
};

// The backends for `spec`'s placement of `m`: the CPU, one GPU, a scheduler
// over several, or tensor-parallel ranks; weights loaded where they go.
// Throws UsageError naming the flag (no GPU, an unknown device, a bad -ot,
// --tp with a split), Error for a share that does not fit (bytes needed
// against free).
ModelBackends make_backends(const Model& m, const RuntimeSpec& spec);

// A session on `b` with the spec's cache and steps; a KV cache that does not
// fit is an Error naming -c and the bytes it needs. ctx_flag: what the
// message calls the context's flag (bench: "-p + -n + -d").
std::unique_ptr<Session> make_session(const Model& m, const ModelBackends& b, const RuntimeSpec& spec,
                                      const std::string& ctx_flag = "--ctx-size");

// --fit: `spec` with the placement engine/gpu_fit.h's rule chooses for `m`
// on the spec's GPU (n_gpu_layers, cpu_moe, n_cpu_moe; fit cleared), *plan
// and *report saying what and why. Without a GPU: everything on the CPU,
// the report says why. UsageError for --fit over several GPUs (--tp,
// --device A,B, -sm layer|tensor, mpirun): it fits one GPU for now.
RuntimeSpec fit_spec(const Model& m, const RuntimeSpec& spec, FitPlan* plan, std::string* report);
// fit_spec's view of the model's bytes (free memory and margin left 0):
// weights per layer (experts apart), the rest as the head, the KV cache of a
// layer at spec.n_ctx cells; weights -ot (or --cpu-moe, --n-cpu-moe) sends to
// the CPU left out, those it sends to `device` ("CUDA0") fixed.
FitInput fit_input(const Model& m, const RuntimeSpec& spec, const std::string& device);

// The expert weights kept on the CPU by --cpu-moe / --n-cpu-moe, as -ot
// rules (none for a dense model).
std::vector<std::string> cpu_expert_overrides(const Model& m, bool cpu_moe, int n_cpu_moe);

// All of it, in the order it must go away: the session, the backends (the
// loaded weights first), the model.
struct Runtime {
  std::unique_ptr<Model> model;
  ModelBackends backends;
  std::unique_ptr<Session> session;  // when spec.n_ctx > 0
  double model_seconds = 0;          // opening the file and its metadata
  Runtime() = default;
  Runtime(Runtime&&) = default;
  Runtime& operator=(Runtime&& o) noexcept;  // this one goes first, in its order
  ~Runtime();
};

// Loads spec.model_path, makes the backends and (n_ctx > 0) the session.
Runtime build_runtime(const RuntimeSpec& spec);

}  // namespace weir
