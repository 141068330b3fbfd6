// weir quantize: convert a GGUF model to another file type. Progress goes to
// stderr (a bar on a terminal, a line every 10% otherwise); the final line
// with sizes, bits per weight and time goes to stdout.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "core/imatrix_file.h"
#include "model/quant_plan.h"
#include "model/quantize_model.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/common.h"
#include "tools/signals.h"

namespace weir::tools {
namespace {

std::string size_text(uint64_t bytes) {
  char buf[32];
  if (bytes < 1024) std::snprintf(buf, sizeof buf, "%llu B", (unsigned long long)bytes);
  else if (bytes < (1u << 20)) std::snprintf(buf, sizeof buf, "%.2f KiB", double(bytes) / 1024.0);
  else if (bytes < (1u << 30)) std::snprintf(buf, sizeof buf, "%.2f MiB", double(bytes) / 1048576.0);
  else std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / 1073741824.0);
  return buf;
}

class ProgressPrinter {
 public:
  ProgressPrinter(std::string out_path, std::string header)
      : out_path_(std::move(out_path)), header_(std::move(header)), tty_(isatty(STDERR_FILENO) != 0),
        t0_(std::chrono::steady_clock::now()) {}

  void operator()(const QuantizeProgress& p) {
    if (stop_requested()) {
      if (tty_) std::fputs("\r\x1b[K", stderr);
      throw Cancelled(out_path_ + " not written");  // the writer removes OUT.part
    }
    if (!header_.empty()) {  // on the first call: the input was readable and the plan is feasible
      std::fprintf(stderr, "%s\n", header_.c_str());
      header_.clear();
    }
    const double frac = p.total_elements ? double(p.done_elements) / double(p.total_elements)
                                         : double(p.tensor + 1) / double(std::max<size_t>(1, p.n_tensors));
    const bool last = p.tensor + 1 == p.n_tensors && p.done_elements == p.total_elements;
    if (tty_) {
      const auto now = std::chrono::steady_clock::now();
      if (!last && now - last_draw_ < std::chrono::milliseconds(100)) return;
      last_draw_ = now;
      constexpr int kWidth = 20;  // the whole line fits 80 columns
      const int fill = int(frac * kWidth);
      std::string name(p.name.substr(0, 28));
      std::fprintf(stderr, "\r[%s%s] %3d%% %zu/%zu %-28s %s -> %s\x1b[K", std::string(size_t(fill), '#').c_str(),
                   std::string(size_t(kWidth - fill), ' ').c_str(), int(frac * 100), p.tensor + 1, p.n_tensors,
                   name.c_str(), dtype_name(p.from), p.copied ? "(copy)" : dtype_name(p.to));
      if (last) std::fputs("\r\x1b[K", stderr);
      std::fflush(stderr);
      return;
    }
    const int decile = int(frac * 10 + 1e-9);
    if (decile <= printed_decile_) return;
    printed_decile_ = decile;
    std::fprintf(stderr, "quantize: %3d%%  %zu/%zu tensors  %.1f s\n", decile * 10, p.tensor + 1, p.n_tensors,
                 seconds_since(t0_));
  }

 private:
  std::string out_path_, header_;
  bool tty_;
  std::chrono::steady_clock::time_point t0_, last_draw_{};
  int printed_decile_ = 0;
};

}  // namespace

int cmd_quantize(int argc, char** argv) {
  std::string in_path, out_path, type_name, imatrix_path;
  int threads = default_threads();
  Args a("quantize", "Convert a GGUF model to another file type (tensor types chosen as llama-quantize does).");
  a.positional("IN", &in_path, "GGUF model to read")
      .positional("OUT", &out_path, "GGUF file to write (written as OUT.part, renamed when complete)")
      .positional("TYPE", &type_name, "file type: Q4_K_M, Q8_0, F16, ... (an unknown name lists them)")
      .opt("-t,--threads", &threads, "N", "CPU threads (default: all CPUs)")
      .opt("--imatrix", &imatrix_path, "FILE",
           "importance matrix (weir imatrix or llama-imatrix: GGUF or legacy .dat); used by the IQ4, Q2_K..Q6_K "
           "and Q4_0..Q5_1 tensors");
  if (!a.parse(argc, argv)) return 0;
  check_threads(threads);
  const FileType ft = parse_file_type(type_name);
  Imatrix imatrix;
  if (!imatrix_path.empty()) {
    imatrix = read_imatrix(imatrix_path);
    std::fprintf(stderr, "quantize: importance matrix %s: %zu entries, %u chunks of %u tokens%s\n",
                 imatrix_path.c_str(), imatrix.entries.size(), imatrix.chunk_count, imatrix.chunk_size,
                 imatrix.legacy ? " (legacy format)" : "");
  }

  ProgressPrinter printer(out_path, "quantize: " + in_path + " -> " + out_path + " as " + file_type_name(ft) + ", " +
                                        std::to_string(threads) + (threads == 1 ? " thread" : " threads"));
  const QuantizeResult r =
      quantize_model(in_path, out_path, ft, threads, [&](const QuantizeProgress& p) { printer(p); },
                     imatrix_path.empty() ? nullptr : &imatrix);
  std::printf("%s: %s (%.2f bpw) -> %s: %s (%.2f bpw) as %s; %zu tensors (%zu converted, %zu copied) in %.2f s\n",
              in_path.c_str(), size_text(r.in_file_bytes).c_str(), r.bpw_in(), out_path.c_str(),
              size_text(r.out_file_bytes).c_str(), r.bpw_out(), file_type_name(ft), r.n_tensors, r.n_converted,
              r.n_copied, r.seconds);
  if (!imatrix_path.empty())
    std::fprintf(stderr, "quantize: %zu tensors quantized with importance weights, %zu without (no entry)\n",
                 r.n_weighted, r.without_importance.size());
  if (r.n_requantized)
    std::fprintf(stderr,
                 "quantize: note: %zu tensors were already quantized and were quantized again; "
                 "quantizing from the F16/BF16/F32 original gives better quality\n",
                 r.n_requantized);
  return 0;
}

}  // namespace weir::tools
