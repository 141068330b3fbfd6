// --fit, -ngl auto and --fit-vram on the command line: what they put in the
// RuntimeSpec, bench's lists with auto among the numbers, and the
// UsageErrors (naming the flag) for bad values and clashes. Then weir run
// --fit on this machine: on a GPU or not, one line says where the model went.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/registry.h"
#include "test_env.h"
#include "tools/args.h"
#include "tools/bench_options.h"
#include "tools/runtime_flags.h"
#include "tools/weir_cli.h"

namespace weir::tools {
namespace {

const uint64_t MiB = uint64_t(1) << 20, GiB = uint64_t(1) << 30;

// weir run's flags parsed from `args`; the spec for model m.gguf.
RuntimeSpec run_spec(std::vector<std::string> args) {
  RuntimeFlags rf;
  Args a("run", "");
  rf.add_to(a, {});
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  a.parse(int(argv.size()), argv.data());
  rf.parsed(a);
  return rf.spec("m.gguf");
}

std::string run_error(std::vector<std::string> args) {
  try {
    run_spec(std::move(args));
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(FitFlags, Sizes) {
  EXPECT_EQ(parse_size("--fit-vram", "2G"), 2 * GiB);
  EXPECT_EQ(parse_size("--fit-vram", "2048M"), 2 * GiB);
  EXPECT_EQ(parse_size("--fit-vram", "2048MiB"), 2 * GiB);
  EXPECT_EQ(parse_size("--fit-vram", "1.5GiB"), 3 * GiB / 2);
  EXPECT_EQ(parse_size("--fit-vram", "1.5g"), 3 * GiB / 2);
  EXPECT_EQ(parse_size("--fit-vram", "512mb"), 512 * MiB);
  EXPECT_EQ(parse_size("--fit-vram", "64K"), uint64_t(64) << 10);
  EXPECT_EQ(parse_size("--fit-vram", "1T"), uint64_t(1) << 40);
  for (const char* bad : {"", "2048", "G", "2X", "2GG", "2GiBs", "1.2.3G", "0G", "-1G", "0.0000001K", "9999999T", "auto"}) {
    try {
      parse_size("--fit-vram", bad);
      ADD_FAILURE() << "'" << bad << "' parsed";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--fit-vram"), std::string::npos) << e.what();
    }
  }
}

TEST(FitFlags, FitAndNglAutoAreOne) {
  for (const auto& args : {std::vector<std::string>{"--fit"}, {"-ngl", "auto"}, {"--n-gpu-layers", "auto"},
                           {"--fit", "-ngl", "auto"}}) {
    const RuntimeSpec s = run_spec(args);
    EXPECT_TRUE(s.fit) << args[0];
    EXPECT_EQ(s.n_gpu_layers, 0);
    EXPECT_EQ(s.fit_vram, 0u);
    EXPECT_EQ(s.kv_type, DType::F16);  // the GPU's type until the fit says otherwise
    EXPECT_TRUE(s.kv_type_default);
    EXPECT_TRUE(s.note);
  }
  RuntimeSpec s = run_spec({"--fit", "--fit-vram", "6G", "-ctk", "q8_0"});
  EXPECT_TRUE(s.fit);
  EXPECT_EQ(s.fit_vram, 6 * GiB);
  EXPECT_EQ(s.kv_type, DType::Q8_0);
  EXPECT_FALSE(s.kv_type_default);
  s = run_spec({"-ngl", "auto", "--fit-vram=4096M", "--device", "1"});
  EXPECT_EQ(s.fit_vram, 4 * GiB);
  EXPECT_EQ(s.main_gpu, 1);  // --device chooses the fit's GPU (no "needs -ngl" error)
  s = run_spec({"-ngl", "12"});
  EXPECT_FALSE(s.fit);
  EXPECT_EQ(s.n_gpu_layers, 12);
  s = run_spec({});
  EXPECT_FALSE(s.fit);
  EXPECT_EQ(s.n_gpu_layers, 0);
}

TEST(FitFlags, Errors) {
  EXPECT_NE(run_error({"--fit-vram", "2G"}).find("--fit-vram caps what --fit places"), std::string::npos);
  EXPECT_NE(run_error({"-ngl", "3", "--fit-vram", "2G"}).find("--fit-vram"), std::string::npos);
  EXPECT_NE(run_error({"--fit", "--fit-vram", "2048"}).find("--fit-vram: '2048': no unit"), std::string::npos);
  EXPECT_NE(run_error({"--fit", "--fit-vram", "lots"}).find("--fit-vram"), std::string::npos);
  EXPECT_NE(run_error({"--fit", "-ngl", "8"}).find("--fit chooses the layers"), std::string::npos);
  EXPECT_NE(run_error({"-ngl", "-1"}).find("-ngl: expected a number of layers (0 or more) or auto"), std::string::npos);
  EXPECT_NE(run_error({"-ngl", "automatic"}).find("-ngl"), std::string::npos);
  EXPECT_NE(run_error({"-ngl", "auto,4"}).find("lists of values are for weir bench"), std::string::npos);
}

bool bench(std::vector<std::string> args, BenchOptions* o) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_bench_options(int(argv.size()), argv.data(), o);
}

TEST(FitFlags, BenchTakesAutoInItsList) {
  BenchOptions o;
  ASSERT_TRUE(bench({"-m", "a.gguf", "-ngl", "0,auto,8-16*2", "--fit-vram", "3G"}, &o));
  EXPECT_EQ(o.plan.n_gpu_layers, (std::vector<int>{0, kNglAuto, 8, 16}));
  const std::vector<BenchTest> tests = expand_tests(o.plan);
  bool seen = false;
  for (const BenchTest& t : tests) {
    const RuntimeSpec s = o.spec_for(t, 640);
    EXPECT_EQ(s.fit, t.n_gpu_layers == kNglAuto);
    if (s.fit) {
      EXPECT_EQ(s.fit_vram, 3 * GiB);
    }
    EXPECT_EQ(s.kv_type, DType::F16);  // bench's cache: f16 whatever the fit chooses
    EXPECT_FALSE(s.kv_type_default);
    seen = seen || s.fit;
  }
  EXPECT_TRUE(seen);
  BenchOptions f;
  ASSERT_TRUE(bench({"-m", "a.gguf", "--fit", "--device", "0"}, &f));
  EXPECT_EQ(f.plan.n_gpu_layers, std::vector<int>{kNglAuto});
  BenchOptions bad;
  EXPECT_THROW(bench({"-m", "a.gguf", "--fit", "-ngl", "0,99"}, &bad), UsageError);
  EXPECT_THROW(bench({"-m", "a.gguf", "-ngl", "0,-2"}, &bad), UsageError);
}

// The whole path on this machine: with no GPU (or no CUDA in the build) the
// model runs on the CPU and the line says so; with one, the line says how
// many layers went there.
TEST(FitFlags, RunSaysWhereTheModelWent) {
  const std::string tiny = test::process_dir() + "/fit-tiny.gguf";
  ASSERT_EQ(test::run_weir("synth --arch llama --preset tiny --type Q8_0 -t 1 -o " + test::shell_quote(tiny)).code, 0);
  const test::CliResult r = test::run_weir("run -m " + test::shell_quote(tiny) + " -p hi -n 2 -t 1 --fit");
  ASSERT_EQ(r.code, 0) << r.err;
  if (cuda_devices().empty()) {
    EXPECT_NE(r.err.find("weir: fit: no GPU ("), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("): everything on the CPU"), std::string::npos) << r.err;
  } else {
    EXPECT_NE(r.err.find("weir: fit: all "), std::string::npos) << r.err;  // a tiny model fits any GPU
  }
  // A cap too small for a layer: on the CPU, with a GPU or without.
  const test::CliResult c = test::run_weir("run -m " + test::shell_quote(tiny) + " -p hi -n 2 -t 1 -ngl auto --fit-vram 1K");
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.err.find("everything on the CPU"), std::string::npos) << c.err;
  const test::CliResult tp = test::run_weir("run -m " + test::shell_quote(tiny) + " -p hi -n 2 --fit --tp 2");
  EXPECT_EQ(tp.code, 2);
  EXPECT_NE(tp.err.find("one GPU for now"), std::string::npos) << tp.err;
}

}  // namespace
}  // namespace weir::tools
