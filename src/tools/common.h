// Pieces shared by the subcommands: loading a model with timing, the default
// thread count, Ctrl-C handling.
#pragma once
#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "model/model.h"

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

// -ngl N: 0 runs on the CPU; N >= the model's layer count (99: any model)
// puts the whole model on the GPU --device D. Values in between would split
// the model, which weir cannot do yet: a UsageError says so.
bool wants_gpu(const Model& m, int n_gpu_layers);
// The backend for these flags: the CPU (threads, cpu options) or a CUDA GPU;
// errors say why a GPU cannot be used (none, no CUDA in this build, ...).
std::unique_ptr<Backend> make_backend(const Model& m, int n_gpu_layers, int device, int threads,
                                      const CpuOptions& cpu);
// "NVIDIA H100 80GB HBM3" for --device d, or "" when there is none.
std::string gpu_name(int device);

// Installs a SIGINT handler that sets the returned flag (a second Ctrl-C
// kills the process as usual).
const std::atomic<bool>& install_interrupt_flag();

}  // namespace weir::tools
