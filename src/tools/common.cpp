#include "tools/common.h"

#include <csignal>
#include <cstdio>
#include <thread>

#include "backend/registry.h"
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

void report_numa(const Backend& backend) {
  const auto* cpu = dynamic_cast<const CpuBackend*>(&backend);
  if (!cpu) return;
  const CpuBackend& b = *cpu;
  if (b.numa().mode == cpu::NumaMode::Off) return;
  std::fprintf(stderr, "weir: numa %s; %s\n", b.numa().describe().c_str(), b.numa_report().describe().c_str());
}

bool wants_gpu(const Model& m, int ngl) {
  if (ngl < 0) throw UsageError("-ngl: expected 0 (CPU) or the number of layers to put on the GPU, got " + std::to_string(ngl));
  if (ngl == 0) return false;
  const int64_t layers = m.hparams().n_layer;
  if (ngl < layers)
    throw UsageError("-ngl " + std::to_string(ngl) + ": this model has " + std::to_string(layers) +
                     " layers and weir cannot split a model between CPU and GPU yet; use -ngl 0 (CPU) or -ngl 99 "
                     "(all on the GPU)");
  return true;
}

std::unique_ptr<Backend> make_backend(const Model& m, int ngl, int device, int threads, const CpuOptions& cpu) {
  if (!wants_gpu(m, ngl)) return std::make_unique<CpuBackend>(threads, cpu);
  std::string why;
  const auto gpus = cuda_devices(&why);
  if (gpus.empty()) throw Error("-ngl " + std::to_string(ngl) + ": no GPU to run on: " + why);
  if (device < 0 || device >= int(gpus.size()))
    throw UsageError("--device " + std::to_string(device) + ": there " + (gpus.size() == 1 ? "is " : "are ") +
                     std::to_string(gpus.size()) + " GPU" + (gpus.size() == 1 ? "" : "s") + " (0.." +
                     std::to_string(gpus.size() - 1) + ")");
  CudaOptions o;
  o.device = device;
  return make_cuda_backend(o);
}

std::string gpu_name(int device) {
  const auto gpus = cuda_devices();
  return device >= 0 && device < int(gpus.size()) ? gpus[size_t(device)].name : std::string();
}

const std::atomic<bool>& install_interrupt_flag() {
  std::signal(SIGINT, on_sigint);
  return g_interrupted;
}

}  // namespace weir::tools
