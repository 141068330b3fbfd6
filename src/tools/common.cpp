#include "tools/common.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "backend/registry.h"
#include "core/error.h"
#include "core/warn.h"
#include "tools/args.h"
#include "tools/signals.h"

namespace weir::tools {

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

std::unique_ptr<Backend> make_backend(const Model& m, int ngl, int device, int threads, const CpuOptions& cpu_in) {
  if (!wants_gpu(m, ngl)) {
    CpuOptions cpu = cpu_in;
    cpu.stop = &stop_flag();
    return std::make_unique<CpuBackend>(threads, cpu);
  }
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

std::unique_ptr<Session> make_session(const Model& m, Backend& b, SessionParams p, const std::string& ctx_flags) {
  p.stop = &stop_flag();
  const HParams& h = m.hparams();
  const double gib = double(h.n_layer) * double(p.n_ctx) *
                     double(row_bytes(p.kv_type, h.n_embd_k()) + row_bytes(p.kv_type, h.n_embd_v())) / double(1 << 30);
  char need[64];
  std::snprintf(need, sizeof need, "%.2f GiB", gib);
  try {
    auto s = std::make_unique<Session>(m, b, p);
    if (h.n_ctx_train > 0 && p.n_ctx > h.n_ctx_train)
      warn("a context of " + std::to_string(p.n_ctx) + " tokens (" + ctx_flags + ") is more than the " +
           std::to_string(h.n_ctx_train) + " tokens the model was trained for (" + h.arch +
           ".context_length); expect degraded output past it");
    return s;
  } catch (const std::bad_alloc&) {
    throw Error("a context of " + std::to_string(p.n_ctx) + " tokens (" + ctx_flags + "): the KV cache needs " + need +
                ", more memory than there is; lower " + ctx_flags);
  } catch (const Error& e) {
    if (std::string(e.what()).rfind("kv cache:", 0) != 0) throw;
    throw Error("a context of " + std::to_string(p.n_ctx) + " tokens (" + ctx_flags + "): the KV cache needs " + need +
                " (" + e.what() + "); lower " + ctx_flags);
  }
}

int64_t first_non_finite(const float* logits, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(logits[i])) return i;
  return -1;
}

std::string gpu_name(int device) {
  const auto gpus = cuda_devices();
  return device >= 0 && device < int(gpus.size()) ? gpus[size_t(device)].name : std::string();
}

void check_threads(int threads, const std::string& flag) {
  if (threads < 1 || threads > kMaxThreads)
    throw UsageError(flag + ": expected 1 to " + std::to_string(kMaxThreads) + " threads, got " +
                     std::to_string(threads));
}

void check_device_flag(bool device_given, int ngl) {
  if (device_given && ngl == 0)
    throw UsageError("--device chooses the GPU for -ngl; without -ngl (or with -ngl 0) the model runs on the CPU");
}

std::string read_text_file(const std::string& path, const std::string& flag) {
  if (path.empty()) throw UsageError(flag + ": expected a file name");
  // O_NONBLOCK for the open alone: a FIFO without a writer must not hang it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(flag + " " + path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw Error(flag + " " + path + ": is a directory, not a text file");
  }
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode)) {
    ::close(fd);
    throw Error(flag + " " + path + ": not a regular file, pipe or terminal");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) {
      if (stop_requested()) break;
      continue;
    }
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      throw Error(flag + " " + path + ": cannot read: " + std::strerror(e));
    }
    if (n == 0) break;
    if (text.size() + size_t(n) > kMaxTextBytes) {
      ::close(fd);
      throw Error(flag + " " + path + ": more than " + std::to_string(kMaxTextBytes >> 20) + " MiB of text");
    }
    text.append(buf, size_t(n));
  }
  ::close(fd);
  return text;
}

void write_stdout(const void* data, size_t n) {
  if (n > 0 && std::fwrite(data, 1, n, stdout) != n)
    throw Error(std::string("cannot write to standard output: ") + std::strerror(errno));
  if (std::fflush(stdout) != 0)
    throw Error(std::string("cannot write to standard output: ") + std::strerror(errno));
}

}  // namespace weir::tools
