#include "tools/common.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "backend/registry.h"
#include "core/error.h"
#include "tools/args.h"
#include "tools/signals.h"

namespace weir::tools {

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

std::function<void(const LoadProgress&)> load_progress_bar() {
  if (!isatty(STDERR_FILENO)) return {};
  auto drawn = std::make_shared<bool>(false);
  return [drawn](const LoadProgress& p) {
    const bool last = p.done >= p.total;
    if (last) {
      if (*drawn) std::fputs("\r\x1b[K", stderr);
      *drawn = false;
      return;
    }
    if (p.seconds < 1.0) return;  // short loads draw nothing
    const double rate = p.seconds > 0 ? double(p.done) / p.seconds : 0;
    const double left = rate > 0 ? double(p.total - p.done) / rate : 0;
    std::fprintf(stderr, "\rweir: loading weights %.2f / %.2f GB (%3.0f%%) %5.1f GB/s, %.0f s left\x1b[K",
                 double(p.done) / 1e9, double(p.total) / 1e9, 100.0 * double(p.done) / double(p.total ? p.total : 1),
                 rate / 1e9, left);
    std::fflush(stderr);
    *drawn = true;
  };
}

int64_t first_non_finite(const float* logits, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(logits[i])) return i;
  return -1;
}

double token_nll(const float* logits, int64_t n, int32_t target) {
  float mx = logits[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(logits[i] - mx));
  return std::log(sum) - double(logits[target] - mx);
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

void add_sampling_flags(Args& a, SamplerParams* sp) {
  a.opt("--temp", &sp->temperature, "T", "temperature; 0 is greedy and deterministic (default 0.8)")
      .opt("--top-k", &sp->top_k, "K", "keep the K most likely tokens (default 40; 0: off)")
      .opt("--top-p", &sp->top_p, "P", "nucleus sampling threshold (default 0.95; 1: off)")
      .opt("--min-p", &sp->min_p, "P", "drop tokens below P x the top probability (default 0.05; 0: off)");
}

void check_sampling(const SamplerParams& sp) {
  if (sp.temperature < 0) throw UsageError("--temp: expected 0 (greedy) or more, got " + std::to_string(sp.temperature));
  if (sp.top_k < 0) throw UsageError("--top-k: expected 0 (off) or more, got " + std::to_string(sp.top_k));
  if (!(sp.top_p > 0 && sp.top_p <= 1)) throw UsageError("--top-p: expected a value in (0, 1], got " + std::to_string(sp.top_p));
  if (!(sp.min_p >= 0 && sp.min_p <= 1)) throw UsageError("--min-p: expected a value in [0, 1], got " + std::to_string(sp.min_p));
  if (!(sp.repeat_penalty > 0))
    throw UsageError("--repeat-penalty: expected a positive value (1: off), got " + std::to_string(sp.repeat_penalty));
  if (sp.repeat_last_n < 0) throw UsageError("--repeat-last-n: expected 0 (off) or more, got " + std::to_string(sp.repeat_last_n));
}

BackendSampling backend_sampling(const SamplerParams& sp, uint64_t seed) {
  BackendSampling bs;
  bs.temperature = sp.temperature;
  bs.top_k = sp.top_k;
  bs.top_p = sp.top_p;
  bs.min_p = sp.min_p;
  bs.seed = seed;
  return bs;
}

void refuse_embeddings_only(const Model& m, const std::string& command) {
  if (!m.hparams().embeddings_only) return;
  throw Error(m.file().name() + ": this model (" + m.hparams().arch + ") only makes embeddings; weir " + command +
              " needs a language model (use weir embed, or weir serve's /v1/embeddings)");
}

ChatTemplate chat_template_for(const Model& m, const std::string& template_file) {
  const Vocab& v = m.tokenizer().vocab();
  if (template_file.empty()) return ChatTemplate::for_model(m.file(), v);
  return ChatTemplate(read_text_file(template_file, "--chat-template-file"), template_file, v);
}

}  // namespace weir::tools
