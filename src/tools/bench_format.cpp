#include "tools/bench_format.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace weir::tools {
namespace {

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

// std::to_string(double) as llama-bench prints avg_ts: "%f".
std::string f6(double x) { return fmt("%f", x); }

// A field's value as text, and whether JSON writes it as a string.
struct Field {
  std::string name, value;
  enum Kind { Str, Num, Bool, Null } kind;
};

std::vector<Field> fields_of(const BenchRow& r, const BenchEnv& env) {
  const BenchResult& res = r.result;
  const BenchTest& t = res.test;
  const BenchModelInfo& m = *r.model;
  const bool tg = t.n_gen > 0 && r.bytes_per_token > 0;
  const bool spec = !t.spec.empty();
  const auto num = [](auto v) { return std::to_string(v); };
  std::vector<Field> f = {
      {"cpu_info", env.cpu_info, Field::Str},
      {"gpu_info", r.on_gpu() ? env.gpu_info : "", Field::Str},
      {"backends", r.backend(), Field::Str},
      {"model_filename", m.path, Field::Str},
      {"model_type", m.description, Field::Str},
      {"model_size", num(m.size_bytes), Field::Num},
      {"model_n_params", num(m.n_params), Field::Num},
      {"n_batch", num(t.n_batch), Field::Num},
      {"n_ubatch", num(t.n_ubatch), Field::Num},
      {"n_threads", num(t.n_threads), Field::Num},
      {"type_k", env.type_kv, Field::Str},
      {"type_v", env.type_kv, Field::Str},
      {"n_gpu_layers", num(t.n_gpu_layers), Field::Num},
      {"n_prompt", num(t.n_prompt), Field::Num},
      {"n_gen", num(t.n_gen), Field::Num},
      {"n_depth", num(t.n_depth), Field::Num},
      {"test_time", res.test_time, Field::Str},
      {"avg_ns", num(res.avg_ns()), Field::Num},
      {"stddev_ns", num(res.stdev_ns()), Field::Num},
      {"avg_ts", f6(res.avg_ts()), Field::Num},
      {"stddev_ts", f6(res.stdev_ts()), Field::Num},
      // weir's own
      {"numa", env.numa, Field::Str},
      {"n_parallel", num(t.n_parallel), Field::Num},
      {"load_ms", fmt("%.3f", m.load_ms), Field::Num},
      {"bytes_per_token", tg ? num(r.bytes_per_token) : "", tg ? Field::Num : Field::Null},
      {"achieved_gbps", tg ? fmt("%.3f", r.achieved_bps() / 1e9) : "", tg ? Field::Num : Field::Null},
      {"mem_read_gbps", tg ? fmt("%.3f", r.mem_read_bps / 1e9) : "", tg ? Field::Num : Field::Null},
  };
  // Speculative decoding's fields only in a run that has it (--spec): the
  // rest stays llama-bench's.
  if (env.show_spec) {
    f.push_back({"spec", t.spec, Field::Str});
    f.push_back({"spec_acceptance", spec ? fmt("%.4f", res.spec_acceptance) : "", spec ? Field::Num : Field::Null});
    f.push_back({"spec_tokens_per_step", spec ? fmt("%.4f", res.spec_tokens_per_step) : "", spec ? Field::Num : Field::Null});
  }
  return f;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    if (c == '"') o += "\\\"";
    else if (c == '\\') o += "\\\\";
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
      o += buf;
    }
    else o += char(c);
  }
  return o;
}

std::string json_value(const Field& f) {
  switch (f.kind) {
    case Field::Str: {
      std::string q(1, '"');
      q.append(json_escape(f.value)).push_back('"');
      return q;
    }
    case Field::Bool: return f.value == "0" ? "false" : "true";
    case Field::Null: return "null";
    case Field::Num: break;
  }
  return f.value;
}

template <class T>
std::string join(const std::vector<T>& v, const char* sep) {
  std::ostringstream o;
  for (size_t i = 0; i < v.size(); ++i) o << (i ? sep : "") << v[i];
  return o.str();
}

class CsvPrinter final : public BenchPrinter {
 public:
  explicit CsvPrinter(BenchEnv env) : env_(std::move(env)) {}
  std::string header() override {
    BenchModelInfo m;
    BenchRow r;
    r.model = &m;
    std::string h;
    for (const Field& f : fields_of(r, env_)) h += (h.empty() ? "" : ",") + f.name;
    return h + "\n";
  }
  std::string row(const BenchRow& r) override {
    std::string line;
    for (const Field& f : fields_of(r, env_)) {
      std::string q = "\"";
      for (char c : f.value) q += c == '"' ? std::string("\"\"") : std::string(1, c);
      line += (line.empty() ? "" : ",") + q + "\"";
    }
    return line + "\n";
  }

 private:
  BenchEnv env_;
};

class JsonPrinter final : public BenchPrinter {
 public:
  JsonPrinter(BenchEnv env, bool lines) : env_(std::move(env)), lines_(lines) {}
  std::string header() override { return lines_ ? "" : "[\n"; }
  std::string row(const BenchRow& r) override {
    const char* ind = lines_ ? "" : "    ";
    const char* nl = lines_ ? " " : "\n";
    std::string o = lines_ ? "{" : (first_ ? "  {\n" : ",\n  {\n");
    first_ = false;
    for (const Field& f : fields_of(r, env_)) o += ind + ("\"" + f.name + "\": " + json_value(f) + ",") + nl;
    o += std::string(ind) + "\"samples_ns\": [ " + join(r.result.samples_ns, ", ") + " ]," + nl;
    o += std::string(ind) + "\"samples_ts\": [ " + join(r.result.samples_ts(), ", ") + " ]";
    o += lines_ ? "}\n" : "\n  }";
    return o;
  }
  std::string footer(const std::vector<BenchRow>&) override { return lines_ ? "" : (first_ ? "]\n" : "\n]\n"); }

 private:
  BenchEnv env_;
  bool lines_;
  bool first_ = true;
};

class MarkdownPrinter final : public BenchPrinter {
 public:
  explicit MarkdownPrinter(BenchEnv env) : env_(std::move(env)) {
    fields_ = {"model", "size", "params", "backend", "threads"};
    if (env_.show_ngl) fields_.push_back("ngl");
    if (env_.show_n_batch) fields_.push_back("n_batch");
    if (env_.show_n_ubatch) fields_.push_back("n_ubatch");
    fields_.push_back("test");
    fields_.push_back("t/s");
    if (env_.show_spec) {
      fields_.push_back("accept");
      fields_.push_back("tok/step");
    }
  }
  // llama-bench's widths; negative: left-aligned.
  int width(const std::string& f) const {
    if (f == "model") return -30;
    if (f == "t/s") return 20;
    if (f == "size" || f == "params") return 10;
    if (f == "backend") return -10;
    if (f == "threads" || f == "n_batch") return 7;
    if (f == "ngl") return 3;
    if (f == "n_ubatch") return 8;
    if (f == "test") return env_.show_spec ? 25 : 15;
    if (f == "accept" || f == "tok/step") return 8;
    return 10;
  }
  static std::string cell(const std::string& v, int w) {
    char buf[256];
    std::snprintf(buf, sizeof buf, " %*s |", w, v.c_str());
    return buf;
  }
  std::string header() override {
    std::string h = "|", sep = "|";
    for (const auto& f : fields_) {
      const int w = width(f);
      h += cell(f, w);
      sep.append(" ").append(size_t(std::abs(w) - 1), '-').append(w > 0 ? ":" : "-").append(" |");
    }
    return h + "\n" + sep + "\n";
  }
  std::string row(const BenchRow& r) override {
    const BenchResult& res = r.result;
    std::string o = "|";
    for (const auto& f : fields_) {
      std::string v;
      int w = width(f);
      if (f == "model") v = r.model->description;
      else if (f == "size") v = bench_size_text(r.model->size_bytes);
      else if (f == "params") v = bench_params_text(r.model->n_params);
      else if (f == "backend") v = r.backend();
      else if (f == "threads") v = std::to_string(res.test.n_threads);
      else if (f == "ngl") v = std::to_string(res.test.n_gpu_layers);
      else if (f == "n_batch") v = std::to_string(res.test.n_batch);
      else if (f == "n_ubatch") v = std::to_string(res.test.n_ubatch);
      else if (f == "test") v = res.test.name();
      else if (f == "t/s") {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.2f \xC2\xB1 %.2f", res.avg_ts(), res.stdev_ts());
        v = buf;
        w += 1;  // '±' is two bytes of UTF-8 but one column
      } else if (f == "accept") {
        v = res.test.spec.empty() || res.test.spec == "off" ? "" : fmt("%.2f", res.spec_acceptance);
      } else if (f == "tok/step") {
        v = res.test.spec.empty() ? "" : fmt("%.2f", res.spec_tokens_per_step);
      }
      o += cell(v, w);
    }
    return o + "\n";
  }
  // Per model: load time and what a decoded token reads; per tg result: the
  // bandwidth it achieved next to the measured read bandwidth.
  std::string footer(const std::vector<BenchRow>& rows) override {
    std::string o;
    bool cpu_rows = false;
    for (const BenchRow& r : rows) cpu_rows = cpu_rows || !r.on_gpu();
    if (cpu_rows && !env_.cpu_kernels.empty()) o += "\nCPU: " + env_.cpu_kernels + "\n";
    const BenchModelInfo* cur = nullptr;
    for (const BenchRow& r : rows) {
      if (r.model != cur) {
        cur = r.model;
        o += "\n" + cur->description + " (" + cur->path + ")\n";
        o += fmt("  load: %.0f ms (open, mmap, tokenizer, first decode graph)\n", cur->load_ms);
        o += fmt("  a decoded token reads %.2f MB of weights", double(cur->weight_bytes_per_token) / 1e6) +
             " (all matrices, the output matrix, one embedding row) + the KV cache at its depth\n";
      }
      if (r.bytes_per_token == 0) continue;
      const BenchTest& t = r.result.test;
      char who[64];
      if (r.on_gpu())
        std::snprintf(who, sizeof who, "GPU");
      else
        std::snprintf(who, sizeof who, "%2d thread%s", t.n_threads, t.n_threads == 1 ? " " : "s");
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    "  %-15s %s: %.2f MB/token (KV %.2f MB) x %.2f t/s = %.2f GB/s, %.0f%% of %.2f GB/s "
                    "measured %s bandwidth\n",
                    t.name().c_str(), who, double(r.bytes_per_token) / 1e6, double(r.kv_bytes_per_token) / 1e6,
                    r.result.avg_ts(), r.achieved_bps() / 1e9,
                    r.mem_read_bps > 0 ? 100.0 * r.achieved_bps() / r.mem_read_bps : 0.0, r.mem_read_bps / 1e9,
                    r.on_gpu() ? "device" : "read");
      o += buf;
    }
    return o;
  }

 private:
  BenchEnv env_;
  std::vector<std::string> fields_;
};

}  // namespace

std::string bench_size_text(uint64_t bytes) {
  if (bytes < (uint64_t(1) << 30)) return fmt("%.2f MiB", double(bytes) / 1024.0 / 1024.0);
  return fmt("%.2f GiB", double(bytes) / 1024.0 / 1024.0 / 1024.0);
}

std::string bench_params_text(uint64_t n) {
  if (n < 1000000000ull) return fmt("%.2f M", double(n) / 1e6);
  return fmt("%.2f B", double(n) / 1e9);
}

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t c = line.find(':');
    if (c == std::string::npos) break;
    const size_t b = line.find_first_not_of(" \t", c + 1);
    return b == std::string::npos ? "" : line.substr(b);
  }
  return "";
}

std::unique_ptr<BenchPrinter> make_bench_printer(const std::string& format, const BenchEnv& env) {
  if (format == "md") return std::make_unique<MarkdownPrinter>(env);
  if (format == "csv") return std::make_unique<CsvPrinter>(env);
  if (format == "json") return std::make_unique<JsonPrinter>(env, false);
  if (format == "jsonl") return std::make_unique<JsonPrinter>(env, true);
  return nullptr;
}

}  // namespace weir::tools
