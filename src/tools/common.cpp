#include "tools/common.h"

#include <csignal>
#include <cstdio>
#include <thread>

#include "core/error.h"
#include "tools/args.h"

namespace weir::tools {
namespace {
std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) {
  if (g_interrupted.exchange(true)) {
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
  }
}
}  // namespace

int default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}

std::unique_ptr<Model> load_model(const std::string& path, double* seconds) {
  if (path.empty()) throw UsageError("no model given (-m MODEL.gguf)");
  const auto t0 = std::chrono::steady_clock::now();
  auto m = Model::load(path);
  if (seconds) *seconds = seconds_since(t0);
  return m;
}

cpu::NumaMode parse_numa_flag(const std::string& s) {
  cpu::NumaMode m;
  if (!cpu::parse_numa_mode(s, &m))
    throw UsageError("--numa: '" + s + "' is not a mode; expected off, distribute or isolate");
  return m;
}

void report_numa(const CpuBackend& b) {
  if (b.numa().mode == cpu::NumaMode::Off) return;
  std::fprintf(stderr, "weir: numa %s; %s\n", b.numa().describe().c_str(), b.numa_report().describe().c_str());
}

const std::atomic<bool>& install_interrupt_flag() {
  std::signal(SIGINT, on_sigint);
  return g_interrupted;
}

}  // namespace weir::tools
