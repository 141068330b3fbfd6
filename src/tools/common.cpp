#include "tools/common.h"

#include <csignal>
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

const std::atomic<bool>& install_interrupt_flag() {
  std::signal(SIGINT, on_sigint);
  return g_interrupted;
}

}  // namespace weir::tools
