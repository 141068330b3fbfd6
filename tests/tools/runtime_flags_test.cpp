// Every command that runs a model takes the same runtime flags: each name of
// runtime_flag_names() is in the --help of run, chat, perplexity, serve,
// bench and embed, with the same help line (bench's list note and -c's
// command-specific default aside); and each command accepts each flag on a
// tiny model (a flag that needs a GPU may fail for want of one, never as an
// unknown option). Also: bench -o json stays JSON when a model cannot open,
// and CPU tensor parallelism gives --tp 1's perplexity on the real model.
#include <gtest/gtest.h>
#include <signal.h>

#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/registry.h"
#include "test_env.h"
#include "tools/process.h"
#include "tools/runtime_flags.h"
#include "tools/weir_cli.h"

namespace weir::test {
namespace {

const char* const kCommands[] = {"run", "chat", "perplexity", "serve", "bench", "embed"};

// The help line of each flag a command's --help lists, by the flag's first name.
std::map<std::string, std::string> help_lines(const std::string& command) {
  const CliResult r = run_weir(command + " --help");
  EXPECT_EQ(r.code, 0) << r.err;
  std::map<std::string, std::string> lines;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, std::regex("^\\s+(-[-a-z0-9]+)"))) lines[m[1].str()] = line;
  }
  return lines;
}

TEST(RuntimeFlags, EveryCommandListsTheSameFlagsWithTheSameHelp) {
  const std::vector<std::string> names = tools::runtime_flag_names();
  ASSERT_GT(names.size(), 30u);
  std::map<std::string, std::string> run_help;
  for (const char* c : kCommands) {
    const CliResult r = run_weir(std::string(c) + " --help");
    ASSERT_EQ(r.code, 0) << c << ": " << r.err;
    for (const std::string& n : names)
      EXPECT_TRUE(std::regex_search(r.out, std::regex("(^|[ ,])" + std::regex_replace(n, std::regex("-"), "\\-") +
                                                          "([ ,]|$)",
                                                      std::regex::multiline)))
          << "weir " << c << " --help lacks " << n;
    const auto lines = help_lines(c);
    if (run_help.empty()) {
      run_help = lines;
      continue;
    }
    for (const auto& [first, line] : run_help) {
      if (first == "-c" || !lines.count(first)) continue;  // -c: each command's own default and meaning
      bool runtime = false;
      for (const std::string& n : names) runtime |= n == first;
      if (!runtime) continue;
      std::string theirs = lines.at(first);
      theirs = std::regex_replace(theirs, std::regex(" \\(a list: each value a test\\)"), "");
      EXPECT_EQ(theirs, line) << "weir " << c << "'s help of " << first << " differs from weir run's";
    }
  }
}

struct Flag {
  const char* args;
  bool needs_gpu;
};

// Each runtime flag with a value the tiny model can run.
const Flag kFlags[] = {
    {"-ngl 0", false},           {"-ot token_embd=CPU", false}, {"--device 0 -ngl 1", true},
    {"-mg 0 -ngl 1", true},      {"-sm none", false},           {"-ts 1 -ngl 1", true},
    {"-cmoe", false},            {"-ncmoe 1", false},           {"--tp 2", false},
    {"-nopo", false},            {"-c 64", false},              {"-b 32", false},
    {"-ub 16", false},           {"-ctk f16", false},           {"-ctk f32 -ctv f32", false},
    {"-fa on", false},           {"-t 1", false},               {"-t 1 -tb 1", false},
    {"--numa off", false},       {"--no-mmap", false},          {"-dio", false},
    {"--fit", false},            {"-ngl auto --fit-vram 1G", false},
};

TEST(RuntimeFlags, EveryCommandAcceptsEveryFlag) {
  const std::string dir = process_dir();
  const std::string tiny = dir + "/flags-tiny.gguf", text = dir + "/flags-text.txt", chat = dir + "/flags-chat.jinja";
  std::ofstream(chat) << "{% for m in messages %}{{ m.content }}{% endfor %}";
  ASSERT_EQ(run_weir("synth --arch llama --preset tiny --type Q8_0 -t 1 -o " + shell_quote(tiny)).code, 0);
  {
    std::ofstream t(text);
    for (int i = 0; i < 200; ++i) t << "the quick brown fox jumps over the lazy dog " << i << "\n";
  }
  const bool have_gpu = !cuda_devices().empty();
  for (const char* c : kCommands) {
    for (const Flag& f : kFlags) {
      const std::string cmd = c;
      std::string base = cmd + " -m " + shell_quote(tiny);
      if (cmd == "run") base += " -p hi -n 1";
      if (cmd == "embed") base += " -p hi -p there";
      if (cmd == "perplexity") base += " -f " + shell_quote(text) + " -c 64 --chunks 1";
      if (cmd == "bench") base += " -p 8 -n 2 -r 1 --no-warmup";
      if (cmd == "serve") base += " --port 0";
      if (cmd == "chat") base += " --chat-template-file " + shell_quote(chat);
      base += std::string(" ") + f.args;
      SCOPED_TRACE("weir " + base);
      int code = -1;
      std::string err;
      if (cmd == "serve") {  // until it listens, then SIGTERM
        ProcOptions o;
        o.signal = SIGTERM;
        o.signal_on_stderr = "listening on";
        o.timeout_s = 60;
        std::vector<std::string> argv = {weir_bin()};
        std::istringstream in(base);
        for (std::string w; in >> w;) argv.push_back(w.size() > 1 && w.front() == '\'' ? w.substr(1, w.size() - 2) : w);
        const ProcResult p = run_process(argv, o, own_dir());
        code = p.exit_code;
        err = p.err;
      } else {
        const CliResult r = run_weir(base + (cmd == "chat" ? " </dev/null" : ""));
        code = r.code;
        err = r.err;
      }
      EXPECT_EQ(err.find("unknown option"), std::string::npos) << err;
      if (f.needs_gpu && !have_gpu) {
        EXPECT_NE(err.find("GPU"), std::string::npos) << err;
      } else {
        EXPECT_EQ(code, 0) << err;
      }
    }
  }
}

TEST(RuntimeFlags, ListsAreForBench) {
  const CliResult r = run_weir("run -m x.gguf -p hi -ngl 0,1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("lists of values are for weir bench"), std::string::npos) << r.err;
  const CliResult fa = run_weir("run -m x.gguf -p hi -fa off");
  EXPECT_EQ(fa.code, 2);
  EXPECT_NE(fa.err.find("-fa off"), std::string::npos) << fa.err;
}

// A second model that cannot open: nothing goes to stdout (not half a JSON
// array), and the error names it.
TEST(RuntimeFlags, BenchJsonStaysJsonWhenAModelFailsToOpen) {
  const std::string dir = process_dir();
  const std::string tiny = dir + "/bench-tiny.gguf";
  ASSERT_EQ(run_weir("synth --arch llama --preset tiny --type Q8_0 -t 1 -o " + shell_quote(tiny)).code, 0);
  const CliResult r = run_weir("bench -m " + shell_quote(tiny) + " -m /nonexistent/second.gguf -p 8 -n 2 -r 1 -t 1 -o json");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("/nonexistent/second.gguf"), std::string::npos) << r.err;
  if (!r.out.empty()) EXPECT_NO_THROW((void)nlohmann::json::parse(r.out)) << r.out;
  const CliResult ok = run_weir("bench -m " + shell_quote(tiny) + " -p 8 -n 2 -r 1 -t 1 -o json");
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(nlohmann::json::parse(ok.out).size(), 2u);
}

// CPU tensor parallelism computes what one rank does (whole rows): the same
// perplexity, chunk by chunk, on the real Gemma 3 (0.16% apart before).
TEST(RuntimeFlags, CpuTensorParallelPerplexityEqualsOneRank) {
  const std::string model = model_path();
  if (model.empty() || access(model.c_str(), R_OK) != 0) GTEST_SKIP() << "no model at " << model;
  const std::string text = process_dir() + "/ppl6k.txt";
  {
    const std::string t = read_file(ref_dir() + "/ppl-text.txt");
    std::ofstream(text) << t.substr(0, 6000);
  }
  std::string one;
  for (int tp : {1, 2}) {
    const CliResult r = run_weir("perplexity -m " + shell_quote(model) + " -f " + shell_quote(text) +
                                 " -c 256 -t 2 --tp " + std::to_string(tp));
    ASSERT_EQ(r.code, 0) << r.err;
    if (tp == 1) one = r.out;
    else EXPECT_EQ(r.out, one) << "--tp 2 scored differently from --tp 1";
  }
  EXPECT_NE(one.find("PPL = "), std::string::npos) << one;
}

}  // namespace
}  // namespace weir::test
