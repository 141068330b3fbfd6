// Pieces shared by the subcommands: loading a model with timing, the default
// thread count, Ctrl-C handling.
#pragma once
#include <atomic>
#include <chrono>
#include <memory>
#include <string>

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
void report_numa(const CpuBackend& b);

// Installs a SIGINT handler that sets the returned flag (a second Ctrl-C
// kills the process as usual).
const std::atomic<bool>& install_interrupt_flag();

}  // namespace weir::tools
