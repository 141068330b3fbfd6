// The weir command as a user meets it: output, exit codes, error messages.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <cstdio>
#include <fstream>
#include <regex>
#include <string>

#include "model/tiny_models.h"
#include "test_env.h"

namespace {

struct Result {
  int code = -1;
  std::string out;  // stdout (stderr too when merged)
};

// Runs `weir ARGS`; stderr goes to stdout when merge_stderr, else is dropped.
Result weir(const std::string& args, bool merge_stderr = false) {
  const std::string cmd = weir::test::weir_bin() + " " + args + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string q(const std::string& s) { return "'" + s + "'"; }

TEST(Cli, NoArgumentsPrintsUsageAndFails) {
  Result r = weir("", true);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("usage: weir"), std::string::npos);
}

TEST(Cli, UnknownCommandAndFlag) {
  EXPECT_EQ(weir("frobnicate").code, 2);
  Result r = weir("run --frobnicate 3", true);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("unknown option '--frobnicate'"), std::string::npos) << r.out;
  r = weir("run -m x.gguf -n notanumber", true);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("-n"), std::string::npos) << r.out;
}

TEST(Cli, MissingModelIsAClearError) {
  Result r = weir("run -m /nonexistent/model.gguf -p hi", true);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("/nonexistent/model.gguf"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << "one line expected: " << r.out;
  r = weir("run -p hi", true);
  EXPECT_EQ(r.code, 2);
}

TEST(Cli, NotAGgufFileIsAClearError) {
  const std::string bad = weir::test::own_dir() + "/not-a-model.gguf";
  std::ofstream(bad) << "this is not a gguf file at all, just some text";
  Result r = weir("run -m " + bad + " -p hi", true);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("magic"), std::string::npos) << r.out;
}

TEST(Cli, HelpExitsZero) {
  Result r = weir("run --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--temp"), std::string::npos);
}

TEST(Cli, TokenizeIds) {
  WEIR_REQUIRE_MODEL(model);
  Result r = weir("tokenize -m " + model + " -p 'Hello world' --ids");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "[2, 9259, 1902]\n");
  r = weir("tokenize -m " + model + " -p '<bos>Hello' --ids --no-bos --no-parse-special");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out, "[2, 9259]\n");
  r = weir("tokenize -m " + model + " -p '<bos>Hello' --ids --no-bos");
  EXPECT_EQ(r.out, "[2, 9259]\n");
}

// A vocabulary-only GGUF (no tensors) is enough to tokenize; BPE ids as llama.cpp's.
TEST(Cli, TokenizeBpeVocabOnly) {
  const std::string vocab = weir::test::ref_dir() + "/qwen2-vocab-deepseek-r1.gguf";
  if (!std::filesystem::exists(vocab)) GTEST_SKIP() << "not found: " << vocab;
  Result r = weir("tokenize -m " + vocab + " -p 'Hello world' --ids");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "[151646, 9707, 1879]\n");
}

// Greedy generation is deterministic and prints only the generated text; the
// reference continuation of this prompt starts " the capital of the country".
TEST(Cli, GreedyRunStreamsOnlyGeneratedText) {
  WEIR_REQUIRE_MODEL(model);
  const std::string args = "run -m " + model + " -p " + q("The capital of France is") + " -n 8 --temp 0 -t 2";
  Result a = weir(args), b = weir(args);
  EXPECT_EQ(a.code, 0);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.out.rfind(" the capital of the country", 0), 0u) << a.out;
  Result c = weir(args, true);
  EXPECT_NE(c.out.find("generation"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("t/s"), std::string::npos) << c.out;
}

TEST(Cli, SampledRunIsReproducibleWithASeed) {
  WEIR_REQUIRE_MODEL(model);
  const std::string args = "run -m " + model + " -p " + q("Once upon a time") + " -n 12 --temp 0.9 --seed 42 -t 2";
  Result a = weir(args), b = weir(args);
  EXPECT_EQ(a.code, 0);
  EXPECT_EQ(a.out, b.out);
  EXPECT_FALSE(a.out.empty());
}

// Ctrl-C stops generation cleanly: the text so far, the timing line, exit 130.
TEST(Cli, InterruptStopsCleanly) {
  WEIR_REQUIRE_MODEL(model);
  const std::string dir = weir::test::own_dir(), out = dir + "/interrupt.out", err = dir + "/interrupt.err";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string bin = weir::test::weir_bin();
    if (!freopen(out.c_str(), "w", stdout) || !freopen(err.c_str(), "w", stderr)) _exit(99);
    execl(bin.c_str(), bin.c_str(), "run", "-m", model.c_str(), "-p", "Once upon a time", "-n", "100000",
          "--ignore-eos", "--temp", "0", "-t", "2", "-c", "2048", static_cast<char*>(nullptr));
    _exit(98);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  kill(pid, SIGINT);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st)) << "killed by a signal";
  EXPECT_EQ(WEXITSTATUS(st), 130);
  std::ifstream e(err);
  std::string text((std::istreambuf_iterator<char>(e)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("interrupted"), std::string::npos) << text;
  EXPECT_NE(text.find("generation"), std::string::npos) << text;
}

// Why generation stopped is said on stderr: -n reached, a full context, an
// end-of-generation token.
TEST(Cli, RunSaysWhyGenerationStopped) {
  WEIR_REQUIRE_MODEL(model);
  Result r = weir("run -m " + model + " -p Once -n 3 --temp 0 -t 2", true);
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("stopped: -n 3 reached"), std::string::npos) << r.out;
  r = weir("run -m " + model + " -p Once -n -1 -c 12 --temp 0 -t 2", true);
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("generation 10 tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stopped: context full (12 tokens; raise --ctx-size)"), std::string::npos) << r.out;
  // A model whose every logit is 0 and whose EOS is id 0: greedy picks it.
  WEIR_TINY_MODEL(dir, "flat-logits-eos0", "");
  r = weir("run -m " + dir + "/flat-logits-eos0.gguf -p hi -n 20 --temp 0 -t 1", true);
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("generation 1 tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stopped: end-of-generation token"), std::string::npos) << r.out;
}

// --no-mmap (the weights read into memory) and --direct-io give the same
// text; a load on a pipe draws no progress bar (no carriage returns), and
// -v says what loading took.
TEST(Cli, NoMmapAndDirectIoGiveTheSameText) {
  WEIR_REQUIRE_MODEL(model);
  const std::string args = "run -m " + model + " -p " + q("The capital of France is") + " -n 6 --temp 0 -t 2";
  const Result plain = weir(args);
  ASSERT_EQ(plain.code, 0);
  for (const char* extra : {" --no-mmap -v", " --no-mmap --direct-io -v", " --direct-io"}) {
    const Result r = weir(args + extra), both = weir(args + extra, true);
    EXPECT_EQ(r.code, 0) << extra << ": " << both.out;
    EXPECT_EQ(r.out, plain.out) << extra;
    EXPECT_EQ(both.out.find('\r'), std::string::npos) << extra << ": " << both.out;
    if (std::string(extra).find("no-mmap") != std::string::npos)
      EXPECT_NE(both.out.find("weir: loaded 0.25 GB"), std::string::npos) << extra << ": " << both.out;
  }
}

// llama-perplexity -c 512 on ppl-text.txt (flash attention off, f32 KV) gives
// 13.9088 +/- 0.64818; weir must land within 1%.
TEST(Cli, PerplexityMatchesLlamaCpp) {
  WEIR_REQUIRE_MODEL(model);
  Result r = weir("perplexity -m " + model + " -f " + weir::test::ref_dir() + "/ppl-text.txt -c 512 -t 2");
  ASSERT_EQ(r.code, 0) << r.out;
  std::smatch m;
  const std::regex last(R"(PPL = ([0-9.]+) \+/- ([0-9.]+)\n$)");
  ASSERT_TRUE(std::regex_search(r.out, m, last)) << r.out;
  const double ppl = std::stod(m[1]), err = std::stod(m[2]);
  std::printf("weir PPL = %.4f +/- %.5f (llama.cpp 13.9088 +/- 0.64818)\n", ppl, err);
  EXPECT_NEAR(ppl, 13.9088, 13.9088 * 0.01);
  EXPECT_NEAR(err, 0.64818, 0.64818 * 0.05);
  EXPECT_NE(r.out.find("[14]"), std::string::npos) << "14 chunks expected";
}

}  // namespace
