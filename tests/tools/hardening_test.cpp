// Every command against what users and the operating system throw at it:
// flag values at and past their edges, paths that are not what they claim,
// outputs that cannot be written, resources that run out, signals at every
// phase. Each case must end with its exit code (2 for bad input, 128 + N
// for signal N), exactly one clear line on stderr naming the flag, file or
// key, no death by a signal, no leftover files, and within a time bound.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backend/registry.h"
#include "model/tiny_models.h"
#include "test_env.h"
#include "tools/process.h"
#include "tools/weir_cli.h"

namespace weir::test {
namespace {

namespace fs = std::filesystem;

// Inputs made once per process: a tiny synth model, text files.
struct Inputs {
  std::string tiny, text, short_text, long_text;
};

const Inputs& inputs() {
  static const Inputs in = [] {
    Inputs i;
    const std::string d = process_dir();
    i.tiny = d + "/tiny-llama.gguf";
    const CliResult r = run_weir("synth --arch llama --preset tiny --type Q8_0 -t 1 -o " + shell_quote(i.tiny));
    EXPECT_EQ(r.code, 0) << r.err;
    i.text = ref_dir() + "/ppl-text.txt";
    i.short_text = d + "/short.txt";
    std::ofstream(i.short_text) << "A few words only.";
    // About 20k tokens of real text for the real model: a long prompt.
    i.long_text = d + "/long.txt";
    const std::string t = read_file(i.text);
    std::ofstream out(i.long_text);
    for (int k = 0; k < 3; ++k) out << t;
    return i;
  }();
  return in;
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::recursive_directory_iterator(dir)) v.push_back(e.path().string());
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  std::string w;
  while (in >> w) v.push_back(w);
  return v;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t i = s.find(from); i != std::string::npos; i = s.find(from, i + to.size())) s.replace(i, from.size(), to);
  return s;
}

uint64_t free_bytes(const std::string& dir) {
  struct statvfs fs {};
  return ::statvfs(dir.c_str(), &fs) == 0 ? uint64_t(fs.f_bavail) * fs.f_frsize : 0;
}

constexpr uint64_t kLowMemory = 4000000ull * 1024;  // `ulimit -v 4000000`

struct Case {
  const char* name;
  const char* args;  // {tiny} {real} {dir} {text} {short} {fifo} {empty} {nan} {copy}
  int code;          // expected exit code
  const char* says;  // stderr must contain this (code 2)
  std::function<void(ProcOptions&)> setup = nullptr;
  bool needs_real = false;
  bool needs_nan = false;   // {nan}: a model whose logits are NaN
  // Found only after work began: progress lines may come first; the error
  // is then the one line that says "error".
  bool late = false;
  double bound_s = 60;
};

void devfull_out(ProcOptions& o) { o.stdout_path = "/dev/full"; }
void devfull_err(ProcOptions& o) { o.stderr_path = "/dev/full"; }
void broken_pipe(ProcOptions& o) { o.stdout_broken_pipe = true; }
void low_memory(ProcOptions& o) { o.address_space_limit = kLowMemory; }
void small_files(ProcOptions& o) { o.file_size_limit = 64 * 1024; }
void no_gpu_only(ProcOptions&) {}  // marks cases that expect no GPU on the machine

const Case kCases[] = {
    // run: flag edges
    {"run_threads_zero", "run -m {tiny} -p hi -n 2 -t 0", 2, "--threads"},
    {"run_threads_negative", "run -m {tiny} -p hi -n 2 -t -3", 2, "--threads"},
    {"run_threads_huge", "run -m {tiny} -p hi -n 2 -t 100000", 2, "--threads"},
    {"run_threads_overflow", "run -m {tiny} -p hi -n 2 -t 99999999999999999999", 2, "-t"},
    {"run_threads_word", "run -m {tiny} -p hi -n 2 -t many", 2, "-t"},
    {"run_n_negative", "run -m {tiny} -p hi -n -5", 2, "-n"},
    {"run_n_overflow", "run -m {tiny} -p hi -n 99999999999", 2, "-n"},
    {"run_ctx_zero", "run -m {tiny} -p hi -c 0", 2, "--ctx-size"},
    {"run_ctx_negative", "run -m {tiny} -p hi -c -100", 2, "--ctx-size"},
    {"run_ctx_overflow", "run -m {tiny} -p hi -c 9223372036854775808", 2, "-c"},
    {"run_batch_zero", "run -m {tiny} -p hi -b 0", 2, "--batch-size"},
    {"run_temp_negative", "run -m {tiny} -p hi --temp -1", 2, "--temp"},
    {"run_temp_nan", "run -m {tiny} -p hi --temp nan", 2, "--temp"},
    {"run_temp_overflow", "run -m {tiny} -p hi --temp 1e40", 2, "--temp"},
    {"run_top_p_zero", "run -m {tiny} -p hi --top-p 0", 2, "--top-p"},
    {"run_top_p_big", "run -m {tiny} -p hi --top-p 1.5", 2, "--top-p"},
    {"run_min_p_negative", "run -m {tiny} -p hi --min-p -0.1", 2, "--min-p"},
    {"run_top_k_negative", "run -m {tiny} -p hi --top-k -1", 2, "--top-k"},
    {"run_repeat_penalty_zero", "run -m {tiny} -p hi --repeat-penalty 0", 2, "--repeat-penalty"},
    {"run_device_without_ngl", "run -m {tiny} -p hi --device 5", 2, "--device"},
    {"run_ngl_negative", "run -m {tiny} -p hi -ngl -1", 2, "-ngl"},
    {"run_ngl_word", "run -m {tiny} -p hi -ngl all", 2, "-ngl"},
    {"run_numa_bad", "run -m {tiny} -p hi --numa sideways", 2, "--numa"},
    {"run_ot_bad_regex", "run -m {tiny} -p hi -ot ffn_(=CPU", 2, "-ot"},
    {"run_ot_no_device", "run -m {tiny} -p hi -ot ffn_.*", 2, "-ot"},
    {"run_ot_unknown_device", "run -m {tiny} -p hi -ot ffn_.*=TPU3", 2, "TPU3"},
    {"run_ngl_without_gpu", "run -m {tiny} -p hi -ngl 1", 2, "-ngl", no_gpu_only},
    {"run_prompt_and_file", "run -m {tiny} -p hi -f {text}", 2, "-f"},
    {"run_repeat_last_n_negative", "run -m {tiny} -p hi --repeat-last-n -2", 2, "--repeat-last-n"},
    {"run_seed_negative", "run -m {tiny} -p hi --seed -1", 2, "--seed"},
    {"run_seed_word", "run -m {tiny} -p hi -s lucky", 2, "-s"},
    {"run_flag_twice_bad_second", "run -m {tiny} -p hi -t 1 -t 0", 2, "--threads"},
    {"run_unknown_flag", "run -m {tiny} -p hi --bogus", 2, "--bogus"},
    {"run_extra_argument", "run -m {tiny} -p hi stray", 2, "stray"},
    {"run_missing_value", "run -p hi -m", 2, "-m"},
    {"run_no_model", "run -p hi", 2, "-m"},
    // run: paths that are not what they claim
    {"run_prompt_file_dir", "run -m {tiny} -f {dir}", 2, "directory"},
    {"run_prompt_file_missing", "run -m {tiny} -f {dir}/nope.txt", 2, "nope.txt"},
    {"run_model_dir", "run -m {dir} -p hi", 2, "directory"},
    {"run_model_missing", "run -m {dir}/nope.gguf -p hi", 2, "nope.gguf"},
    {"run_model_fifo", "run -m {fifo} -p hi", 2, "not a regular file"},
    {"run_model_devnull", "run -m /dev/null -p hi", 2, "not a regular file"},
    {"run_model_empty", "run -m {empty} -p hi", 2, "empty"},
    {"run_model_text", "run -m {text} -p hi", 2, "magic"},
    {"run_model_broken", "run -m {nan} -p hi -n 4", 2, "non-finite", nullptr, false, true, true},
    {"run_prompt_too_long", "run -m {tiny} -f {text} -c 64", 2, "--ctx-size"},
    // run: resources and outputs
    {"run_kv_cache_too_big", "run -m {tiny} -p hi -c 2000000000", 2, "--ctx-size", low_memory},
    {"run_threads_cannot_start", "run -m {tiny} -p hi -n 2 -t 1000", 2, "--threads", low_memory},
    {"run_stdout_full", "run -m {tiny} -p hi -n 4 --temp 0 --ignore-eos", 2, "standard output", devfull_out},
    {"run_stdout_closed_pipe", "run -m {tiny} -p hi -n 4 --temp 0 --ignore-eos", 2, "standard output", broken_pipe},
    {"run_stderr_full", "run -m {tiny} -p hi -n 4 --temp 0", 0, "", devfull_err},
    {"run_generate_nothing", "run -m {tiny} -p hi -n 0", 0, ""},
    // perplexity
    {"ppl_text_is_dir", "perplexity -m {tiny} -f {dir}", 2, "directory"},
    {"ppl_no_text", "perplexity -m {tiny}", 2, "-f"},
    {"ppl_ctx_small", "perplexity -m {tiny} -f {text} -c 3", 2, "--ctx-size"},
    {"ppl_chunks_zero", "perplexity -m {tiny} -f {text} --chunks 0", 2, "--chunks"},
    {"ppl_threads_zero", "perplexity -m {tiny} -f {text} -t 0", 2, "--threads"},
    {"ppl_short_text", "perplexity -m {tiny} -f {short} -c 512", 2, "fewer than one chunk"},
    {"ppl_broken_model", "perplexity -m {nan} -f {text} -c 16 --chunks 1", 2, "non-finite", nullptr, false, true, true},
    {"ppl_device_without_ngl", "perplexity -m {tiny} -f {text} --device 1", 2, "--device"},
    // bench
    {"bench_prompt_negative", "bench -m {tiny} -p -1", 2, "-p"},
    {"bench_prompt_huge", "bench -m {tiny} -p 100000000", 2, "-p"},
    {"bench_reps_zero", "bench -m {tiny} -r 0", 2, "-r"},
    {"bench_threads_zero", "bench -m {tiny} -t 0", 2, "-t"},
    {"bench_parallel_zero", "bench -m {tiny} -np 0", 2, "-np"},
    {"bench_output_bad", "bench -m {tiny} -o yaml", 2, "-o"},
    {"bench_model_dir", "bench -m {dir} -p 4 -n 0 -r 1", 2, "directory"},
    {"bench_device_without_ngl", "bench -m {tiny} --device 3", 2, "--device"},
    {"bench_too_many_tests", "bench -m {tiny} -p 1-4000 -n 1-4000 -t 1-100", 2, "tests"},
    {"bench_nothing", "bench -m {tiny} -p 0 -n 0", 2, "nothing to run"},
    {"bench_depth_negative", "bench -m {tiny} -d -5", 2, "-d"},
    {"bench_ubatch_zero", "bench -m {tiny} -ub 0", 2, "-ub"},
    {"bench_cache_type_bad", "bench -m {tiny} -ctk q4_0", 2, "-ctk"},
    {"bench_range_backwards", "bench -m {tiny} -p 512-128", 2, "-p"},
    {"ppl_ctx_huge", "perplexity -m {tiny} -f {text} -c 99999999999", 2, "--ctx-size"},
    {"ppl_batch_zero", "perplexity -m {tiny} -f {text} -b 0", 2, "--batch-size"},
    // tokenize
    {"tok_text_is_dir", "tokenize -m {tiny} -f {dir}", 2, "directory"},
    {"tok_text_and_file", "tokenize -m {tiny} -p hi -f {text}", 2, "-f"},
    {"tok_no_model", "tokenize -p hi", 2, "-m"},
    {"tok_model_dir", "tokenize -m {dir} -p hi", 2, "directory"},
    {"tok_stdout_full", "tokenize -m {tiny} -p hello", 2, "standard output", devfull_out},
    // imatrix
    {"imx_no_text", "imatrix -m {tiny}", 2, "-f"},
    {"imx_chunks_zero", "imatrix -m {tiny} -f {text} --chunks 0", 2, "--chunks"},
    {"imx_ctx_small", "imatrix -m {tiny} -f {text} -c 3", 2, "--ctx-size"},
    {"imx_short_text", "imatrix -m {tiny} -f {short} -c 512", 2, "fewer than one chunk"},
    {"imx_on_gpu", "imatrix -m {tiny} -f {text} -ngl 99", 2, "CPU only"},
    {"imx_output_is_dir", "imatrix -m {tiny} -f {text} -c 16 --chunks 1 -o {dir}", 2, "directory"},
    {"q_imatrix_missing", "quantize --imatrix {dir}/nope.imatrix {tiny} {dir}/out.gguf IQ4_NL", 2, "nope.imatrix"},
    {"q_imatrix_not_one", "quantize --imatrix {text} {tiny} {dir}/out.gguf IQ4_NL", 2, "imatrix"},
    // quantize
    {"q_output_is_input", "quantize {copy} {copy} Q8_0", 2, "input"},
    {"q_output_is_dir", "quantize {tiny} {dir} Q8_0", 2, "directory"},
    {"q_output_dir_missing", "quantize {tiny} {dir}/no/out.gguf Q8_0", 2, "no/out.gguf"},
    {"q_type_bad", "quantize {tiny} {dir}/out.gguf Q9_9", 2, "Q9_9"},
    {"q_threads_zero", "quantize {tiny} {dir}/out.gguf Q8_0 -t 0", 2, "--threads"},
    {"q_input_missing", "quantize {dir}/nope.gguf {dir}/out.gguf Q8_0", 2, "nope.gguf"},
    {"q_input_dir", "quantize {dir} {dir}/out.gguf Q8_0", 2, "directory"},
    {"q_input_not_gguf", "quantize {text} {dir}/out.gguf Q8_0", 2, "magic"},
    {"q_missing_type", "quantize {tiny} {dir}/out.gguf", 2, "TYPE"},
    {"q_extra_argument", "quantize {tiny} {dir}/out.gguf Q8_0 more", 2, "more"},
    {"q_output_too_big", "quantize {tiny} {dir}/out.gguf F32", 2, "out.gguf: write failed", small_files, false, false,
     true},
    {"q_threads_cannot_start", "quantize {tiny} {dir}/out.gguf Q8_0 -t 1000", 2, "--threads", low_memory},
    // synth
    {"s_layers_zero", "synth --arch llama --preset tiny --type Q8_0 --layers 0 -o {dir}/s.gguf", 2, "--layers"},
    {"s_layers_negative", "synth --arch llama --preset tiny --type Q8_0 --layers -2 -o {dir}/s.gguf", 2, "--layers"},
    {"s_layers_huge", "synth --arch llama --preset tiny --type Q8_0 --layers 100000 -o {dir}/s.gguf", 2, "--layers"},
    {"s_type_bad", "synth --arch llama --preset tiny --type Q9_9 -o {dir}/s.gguf", 2, "Q9_9"},
    {"s_preset_bad", "synth --arch llama --preset huge-9b --type Q8_0 -o {dir}/s.gguf", 2, "huge-9b"},
    {"s_arch_bad", "synth --arch mamba --preset tiny --type Q8_0 -o {dir}/s.gguf", 2, "mamba"},
    {"s_output_is_dir", "synth --arch llama --preset tiny --type Q8_0 -o {dir}", 2, "directory"},
    {"s_output_dir_missing", "synth --arch llama --preset tiny --type Q8_0 -o {dir}/no/s.gguf", 2, "no/s.gguf"},
    {"s_threads_zero", "synth --arch llama --preset tiny --type Q8_0 -t 0 -o {dir}/s.gguf", 2, "--threads"},
    {"s_seed_negative", "synth --arch llama --preset tiny --type Q8_0 --seed -4 -o {dir}/s.gguf", 2, "--seed"},
    {"s_no_output", "synth --arch llama --preset tiny --type Q8_0", 2, "-o"},
    {"s_vocab_dir", "synth --arch llama --preset tiny --type Q8_0 --vocab {dir} -o {dir}/s.gguf", 2, "directory"},
    {"s_vocab_is_output", "synth --arch llama --preset tiny --type Q8_0 --vocab {copy} -o {copy}", 2, "input"},
    {"s_output_too_big", "synth --arch llama --preset tiny --type F32 -o {dir}/s.gguf", 2, "s.gguf: write failed",
     small_files},
    {"s_threads_cannot_start", "synth --arch llama --preset tiny --type Q8_0 -t 1000 -o {dir}/s.gguf", 2, "--threads",
     low_memory},
    // inspect
    {"i_dir", "inspect {dir}", 2, "directory"},
    {"i_missing", "inspect {dir}/nope.gguf", 2, "nope.gguf"},
    {"i_fifo", "inspect {fifo}", 2, "not a regular file"},
    {"i_stdout_full", "inspect {tiny}", 2, "standard output", devfull_out},
    {"i_stdout_closed_pipe", "inspect {tiny} --all", 2, "standard output", broken_pipe},
    // the program
    {"version", "--version", 0, ""},
    {"unknown_command", "frobnicate", 2, "frobnicate"},
};

class BadInput : public ::testing::TestWithParam<Case> {};

TEST_P(BadInput, EndsCleanlyWithOneLineNamingTheCause) {
  const Case& c = GetParam();
  const Inputs& in = inputs();
  ASSERT_TRUE(fs::exists(in.tiny)) << "weir synth could not make the tiny model";
  const std::string dir = own_dir() + "/work", scratch = own_dir() + "/scratch";
  fs::create_directories(dir);
  fs::create_directories(scratch);
  std::string args = c.args;
  if (c.needs_real) {
    WEIR_REQUIRE_MODEL(real);
    args = replace_all(args, "{real}", real);
  }
  if (c.needs_nan) {
    WEIR_TINY_MODEL(nan_dir, "broken-nan-weights", "");
    args = replace_all(args, "{nan}", nan_dir + "/broken-nan-weights.gguf");
  }
  // Inputs inside the checked folder: they must be there, unchanged, after.
  const std::string fifo = dir + "/fifo", empty = dir + "/empty.gguf", copy = dir + "/copy.gguf";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  std::ofstream(empty).close();
  fs::copy_file(in.tiny, copy);
  args = replace_all(args, "{tiny}", in.tiny);
  args = replace_all(args, "{dir}", dir);
  args = replace_all(args, "{text}", in.text);
  args = replace_all(args, "{short}", in.short_text);
  args = replace_all(args, "{fifo}", fifo);
  args = replace_all(args, "{empty}", empty);
  args = replace_all(args, "{copy}", copy);
  const std::vector<std::string> before = files_in(dir);
  const std::string copy_bytes = read_file(copy);

  ProcOptions o;
  o.timeout_s = c.bound_s;
  if (c.setup) c.setup(o);
  if (c.setup && c.setup.target<void (*)(ProcOptions&)>() &&
      *c.setup.target<void (*)(ProcOptions&)>() == &no_gpu_only && !cuda_devices().empty())
    GTEST_SKIP() << "a GPU is here";
  std::vector<std::string> argv = split(args);
  argv.insert(argv.begin(), weir_bin());
  const ProcResult r = run_process(argv, o, scratch);

  SCOPED_TRACE(args);
  EXPECT_FALSE(r.timed_out) << "still running after " << c.bound_s << " s";
  EXPECT_EQ(r.term_signal, 0) << "killed by signal " << r.term_signal;
  EXPECT_EQ(r.exit_code, c.code) << r.err;
  if (c.code == 2 && o.stderr_path.empty()) {
    ASSERT_FALSE(r.err.empty());
    std::string line = r.err;
    if (c.late) {  // the last line; no other says "error"
      const size_t start = r.err.rfind('\n', r.err.size() - 2);
      line = start == std::string::npos ? r.err : r.err.substr(start + 1);
      EXPECT_EQ(r.err.find("error"), r.err.size() - line.size() + line.find("error")) << r.err;
    }
    EXPECT_EQ(line.find('\n'), line.size() - 1) << "exactly one line expected:\n" << r.err;
    EXPECT_NE(line.find(c.says), std::string::npos) << "should name '" << c.says << "':\n" << r.err;
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
  }
  if (std::string(c.name) == "version") {
    EXPECT_EQ(r.out.rfind("weir ", 0), 0u) << r.out;
    EXPECT_NE(r.out.find("CPU: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("CUDA: "), std::string::npos) << r.out;
  }
  if (c.code != 0) {
    EXPECT_EQ(files_in(dir), before) << "files were left behind or removed";
  }
  EXPECT_EQ(read_file(copy), copy_bytes) << "an input was changed";
}

INSTANTIATE_TEST_SUITE_P(Cli, BadInput, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// The free-space check: a file that cannot fit is refused before it is begun.
TEST(BadInputDisk, SynthRefusesAFileTheDiskCannotHold) {
  const std::string dir = own_dir();
  // llama-3.1-70b in F32: ~282 GB.
  if (free_bytes(dir) > 250ull * 1000 * 1000 * 1000) GTEST_SKIP() << "this disk could hold it";
  const ProcResult r = run_process(
      {weir_bin(), "synth", "--arch", "llama", "--preset", "llama-3.1-70b", "--type", "F32", "-o", dir + "/big.gguf"},
      ProcOptions{}, dir);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("free"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir + "/big.gguf.part"));
}

// -- signals at every phase ---------------------------------------------------

struct SignalCase {
  const char* name;
  const char* args;      // {real} {dir} {long} {out}
  const char* trigger;   // on stderr ("" with file: the output's .part)
  bool on_part_file;     // trigger when {out}.part appears
  int signal;
  int delay_ms;
};

const SignalCase kSignalCases[] = {
    {"run_load_sigint", "run -v -m {real} -p hi -n 64 -t 2", "loading the model", false, SIGINT, 0},
    {"run_prompt_sigint", "run -v -m {real} -f {long} -c 32768 -n 4 -t 2", "weir: prompt of", false, SIGINT, 500},
    {"run_prompt_sigterm", "run -v -m {real} -f {long} -c 32768 -n 4 -t 2", "weir: prompt of", false, SIGTERM, 500},
    {"run_generation_sigint", "run -v -m {real} -p hi -n 100000 -c 4096 --ignore-eos -t 2", "weir: generating", false,
     SIGINT, 300},
    {"run_generation_sighup", "run -v -m {real} -p hi -n 100000 -c 4096 --ignore-eos -t 2", "weir: generating", false,
     SIGHUP, 300},
    {"ppl_sigterm", "perplexity -m {real} -f {long} -c 512 -t 2", "weir perplexity:", false, SIGTERM, 300},
    {"bench_sigint", "bench -m {real} -p 512 -n 0 -r 50 -t 2", "", false, SIGINT, 2000},
    {"quantize_sigint", "quantize {real} {out} Q8_0 -t 2", "quantize: ", false, SIGINT, 200},
    {"quantize_sigterm", "quantize {real} {out} Q8_0 -t 2", "quantize: ", false, SIGTERM, 200},
    {"quantize_sighup", "quantize {real} {out} Q8_0 -t 2", "quantize: ", false, SIGHUP, 200},
    {"synth_sigint", "synth --arch llama --preset llama-3.2-1b --layers 2 --type Q8_0 -t 2 -o {out}", "", true, SIGINT, 50},
    {"synth_sigterm", "synth --arch llama --preset llama-3.2-1b --layers 2 --type Q8_0 -t 2 -o {out}", "", true, SIGTERM,
     50},
    {"synth_sighup", "synth --arch llama --preset llama-3.2-1b --layers 2 --type Q8_0 -t 2 -o {out}", "", true, SIGHUP, 50},
};

class Signal : public ::testing::TestWithParam<SignalCase> {};

TEST_P(Signal, StopsPromptlyWithItsExitCodeAndLeavesNoPartialFile) {
  const SignalCase& c = GetParam();
  WEIR_REQUIRE_MODEL(real);
  const std::string dir = own_dir() + "/work", scratch = own_dir() + "/scratch";
  fs::create_directories(dir);
  fs::create_directories(scratch);
  const std::string out = dir + "/out.gguf";
  std::ofstream(out) << "an existing output, to be left as it is";  // an existing OUT stays untouched
  std::string args = c.args;
  args = replace_all(args, "{real}", real);
  args = replace_all(args, "{long}", inputs().long_text);
  args = replace_all(args, "{out}", out);
  const std::vector<std::string> before = files_in(dir);
  ProcOptions o;
  o.signal = c.signal;
  o.signal_delay_ms = c.delay_ms;
  if (c.on_part_file) o.signal_on_file = out + ".part";
  else if (*c.trigger) o.signal_on_stderr = c.trigger;
  else o.signal_after_ms = 0;
  o.timeout_s = 120;
  std::vector<std::string> argv = split(args);
  argv.insert(argv.begin(), weir_bin());
  const ProcResult r = run_process(argv, o, scratch);
  SCOPED_TRACE(args);
  ASSERT_TRUE(r.signalled) << "the trigger never came; stderr:\n" << r.err;
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.term_signal, 0) << "killed by signal " << r.term_signal;
  EXPECT_EQ(r.exit_code, 128 + c.signal) << r.err;
  EXPECT_NE(r.err.find("interrupted"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds_after_signal, 5.0) << "took that long to stop";
  EXPECT_EQ(files_in(dir), before) << "files were left behind";
  EXPECT_EQ(read_file(out), "an existing output, to be left as it is");
}

INSTANTIATE_TEST_SUITE_P(Cli, Signal, ::testing::ValuesIn(kSignalCases),
                         [](const auto& info) { return std::string(info.param.name); });

// A second signal ends the process at once (the convention: death by that
// signal), and still removes the partial file.
TEST(SignalTwice, EndsAtOnceAndRemovesThePartialFile) {
  const std::string dir = own_dir() + "/work", scratch = own_dir() + "/scratch";
  fs::create_directories(dir);
  fs::create_directories(scratch);
  const std::string out = dir + "/s.gguf";
  // Two signals close together: the first sets the flag, the second comes
  // before the writer's next piece.
  const std::vector<std::string> argv = {weir_bin(), "synth", "--arch", "llama", "--preset", "llama-3.2-1b",
                                         "--layers", "2", "--type", "Q8_0", "-t", "1", "-o", out};
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::vector<char*> a;
    for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    freopen("/dev/null", "w", stderr);
    execv(a[0], a.data());
    _exit(121);
  }
  for (int i = 0; i < 5000 && !fs::exists(out + ".part"); ++i) usleep(1000);
  kill(pid, SIGTERM);
  kill(pid, SIGTERM);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  // Either it noticed the first in time (exit 143) or the second ended it.
  EXPECT_TRUE((WIFEXITED(st) && WEXITSTATUS(st) == 143) || (WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM));
  EXPECT_FALSE(fs::exists(out + ".part"));
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace weir::test
