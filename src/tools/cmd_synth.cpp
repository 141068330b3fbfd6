// weir synth: write a random-weight model with the shapes and metadata of a
// real one (model/synth.h), for benchmarks.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "core/gguf.h"
#include "model/synth.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/common.h"
#include "tools/signals.h"

namespace weir::tools {
namespace {

constexpr int64_t kMaxLayers = 4096;  // real models have at most a few hundred

// Bytes of tensor data in a file of type `type` ("" when the type plan
// cannot make that type).
std::string size_str(const SynthPreset& p, const char* type) {
  try {
    uint64_t n = 0;
    for (const SynthTensor& t : plan_synth_tensors(p, parse_file_type(type))) n += row_bytes(t.type, t.n_elements());
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f GB", double(n) / 1e9);
    return buf;
  } catch (const Error&) {
    return "-";
  }
}

void list_presets(const std::string& arch) {
  std::printf("%-14s %-7s %8s %8s %6s %5s %5s %5s %5s %6s %10s %10s %10s\n", "preset", "arch", "params", "n_vocab",
              "n_embd", "layer", "head", "kv", "hd", "n_ff", "F16", "Q8_0", "Q4_K_M");
  for (const SynthPreset& p : synth_presets()) {
    if (!arch.empty() && p.arch != arch) continue;
    uint64_t params = 0;
    for (const SynthTensor& t : synth_tensors(p)) params += uint64_t(t.n_elements());
    const bool big = params >= 1000000000ull;
    std::printf("%-14s %-7s %7.2f%c %8lld %6lld %5lld %5lld %5lld %5lld %6lld %10s %10s %10s\n", p.name.c_str(),
                p.arch.c_str(), double(params) / (big ? 1e9 : 1e6), big ? 'B' : 'M', (long long)p.n_vocab,
                (long long)p.n_embd, (long long)p.n_layer, (long long)p.n_head, (long long)p.n_head_kv,
                (long long)p.head_dim, (long long)p.n_ff, size_str(p, "F16").c_str(), size_str(p, "Q8_0").c_str(),
                size_str(p, "Q4_K_M").c_str());
  }
  std::printf("(sizes of the tensor data; '-': file type not available in this build)\n");
}

}  // namespace

int cmd_synth(int argc, char** argv) {
  std::string arch, preset_name, type_name, vocab_path, out;
  uint64_t seed = 1;
  int64_t layers = 0;
  int threads = default_threads();
  Args a("synth",
         "Write a model with random weights and the shapes and metadata of a real one, for benchmarks.\n"
         "--arch alone lists its presets; no flags list them all.");
  a.opt("--arch", &arch, "ARCH", "architecture: llama, qwen2, qwen3, gemma3")
      .opt("--preset", &preset_name, "NAME", "model preset of that architecture (e.g. llama-3.1-8b, tiny)")
      .opt("--type", &type_name, "T", "file type: F32, F16, BF16, Q8_0, Q4_0, Q4_K_M, Q5_K_M, Q6_K ...")
      .opt("--vocab", &vocab_path, "FILE", "copy the tokenizer from this GGUF (its size sets the vocab rows)")
      .opt("--seed", &seed, "S", "random seed (default 1); the same seed writes the same file")
      .opt("--layers", &layers, "N", "override the number of layers")
      .opt("-t,--threads", &threads, "N", "generator threads (default: all CPUs)")
      .opt("-o,--output", &out, "FILE", "output GGUF file");
  if (!a.parse(argc, argv)) return 0;
  if (!arch.empty()) {
    bool ok = false;
    for (const std::string& x : synth_archs()) ok = ok || x == arch;
    if (!ok) (void)find_synth_preset(arch, preset_name);  // throws, naming the known architectures
  }
  if (preset_name.empty() || arch.empty()) {
    if (!preset_name.empty()) throw UsageError("--preset needs --arch");
    if (!out.empty() || !type_name.empty()) throw UsageError("give --arch and --preset");
    list_presets(arch);
    return 0;
  }
  if (type_name.empty()) throw UsageError("--type is required (e.g. --type Q4_K_M)");
  if (out.empty()) throw UsageError("-o OUT.gguf is required");
  check_threads(threads);
  if (a.given("--layers") && (layers < 1 || layers > kMaxLayers))
    throw UsageError("--layers: expected 1 to " + std::to_string(kMaxLayers) + ", got " + std::to_string(layers));

  SynthPreset p = find_synth_preset(arch, preset_name);
  if (a.given("--layers")) p.n_layer = layers;
  SynthOptions o;
  o.file_type = parse_file_type(type_name);
  o.seed = seed;
  o.threads = threads;
  GGUFFile vocab;
  if (!vocab_path.empty()) {
    vocab = GGUFFile::open(vocab_path);
    const GGUFValue* t = vocab.find("tokenizer.ggml.tokens");
    if (!t || t->type != GGUFType::ARRAY) throw Error(vocab_path + ": has no tokenizer.ggml.tokens");
    if (int64_t(t->count) != p.n_vocab) {
      std::fprintf(stderr, "weir synth: note: %s has %llu tokens; token_embd gets that many rows instead of %s's %lld\n",
                   vocab_path.c_str(), (unsigned long long)t->count, p.name.c_str(), (long long)p.n_vocab);
      p.n_vocab = int64_t(t->count);
    }
    o.vocab = &vocab;
  }

  // A stop signal ends it at the next piece; the writer then removes the
  // partial file.
  const bool tty = isatty(STDERR_FILENO);
  const auto t0 = std::chrono::steady_clock::now();
  auto last = t0;
  o.progress = [&](uint64_t done, uint64_t total) {
    if (stop_requested()) {
      if (tty) std::fputs("\r\x1b[K", stderr);
      throw Cancelled(out + " not written");
    }
    if (!tty) return;
    const auto now = std::chrono::steady_clock::now();
    if (done < total && now - last < std::chrono::milliseconds(200)) return;
    last = now;
    const double s = seconds_since(t0);
    std::fprintf(stderr, "\rweir synth: %.2f / %.2f GB (%3.0f%%) %6.0f MB/s", double(done) / 1e9,
                 double(total) / 1e9, 100.0 * double(done) / double(total ? total : 1), s > 0 ? double(done) / 1e6 / s : 0.0);
  };
  const SynthResult r = write_synth_model(p, o, out);
  const double s = seconds_since(t0);
  if (tty) std::fputc('\n', stderr);
  std::fprintf(stderr, "weir synth: wrote %s: %s %s, %.3fB params, %zu tensors, %.3f GB in %.2f s (%.0f MB/s)\n",
               out.c_str(), p.name.c_str(), file_type_name(o.file_type), double(r.n_params) / 1e9, r.n_tensors,
               double(r.file_bytes) / 1e9, s, double(r.file_bytes) / 1e6 / s);
  return 0;
}

}  // namespace weir::tools
