// weir chat through a pseudo-terminal, as a user types: answers stream
// after the prompt, the second turn reuses the cache (its answer equals
// `weir run` on the whole rendered conversation), Ctrl-C stops an answer
// and the program goes on, /clear starts over, Ctrl-D leaves with code 0.
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <fstream>
#include <thread>
#include <string>
#include <vector>

#include "model/tiny_models.h"
#include "test_env.h"
#include "tools/weir_cli.h"

namespace weir::test {
namespace {

// A program on a pseudo-terminal: what it prints, and keys typed into it.
class Terminal {
 public:
  explicit Terminal(const std::vector<std::string>& args) {
    pid_ = forkpty(&fd_, nullptr, nullptr, nullptr);
    if (pid_ == 0) {
      sigset_t none;  // a clean signal state, as a shell gives
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) signal(sig, SIG_DFL);
      std::vector<char*> argv;
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~Terminal() {
    if (pid_ > 0 && !done_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) close(fd_);
  }
  void type(const std::string& keys) { ASSERT_EQ(write(fd_, keys.data(), keys.size()), ssize_t(keys.size())); }
  // Reads until `text` appears after `from` (an offset in everything read); false past the time.
  bool wait_for(const std::string& text, size_t from, double seconds = 120) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (seen_.find(text, from) == std::string::npos) {
      if (std::chrono::steady_clock::now() > end) return false;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 100) > 0) {
        char buf[4096];
        const ssize_t n = read(fd_, buf, sizeof buf);
        if (n <= 0) return seen_.find(text, from) != std::string::npos;
        seen_.append(buf, size_t(n));
      }
    }
    return true;
  }
  int exit_code(double seconds = 60) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      char buf[4096];
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) > 0 && read(fd_, buf, sizeof buf) > 0) continue;
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        done_ = true;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      if (std::chrono::steady_clock::now() > end) return -1;
    }
  }
  const std::string& seen() const { return seen_; }
  // Types a line and returns the answer printed before the next prompt.
  std::string ask(const std::string& line) {
    const size_t from = seen_.size();
    type(line + "\n");
    if (!wait_for(line, from)) return "(no echo)";
    const size_t echo = seen_.find(line, from) + line.size();
    if (!wait_for("> ", echo)) return "(no prompt after the answer)";
    std::string a = seen_.substr(echo, seen_.find("> ", echo) - echo), out;
    for (char c : a)
      if (c != '\r') out += c;
    if (!out.empty() && out.front() == '\n') out.erase(0, 1);  // the echoed line's end
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }

 private:
  int fd_ = -1;
  pid_t pid_ = -1;
  bool done_ = false;
  std::string seen_;
};

TEST(Chat, TwoTurnsEqualRunOnTheWholeConversation) {
  WEIR_REQUIRE_MODEL(model);
  Terminal t({weir_bin(), "chat", "-m", model, "--temp", "0", "-n", "12", "-t", "2"});
  ASSERT_TRUE(t.wait_for("> ", 0)) << t.seen();
  const std::string first = t.ask("Name a fruit.");
  const std::string second = t.ask("And a color?");
  ASSERT_FALSE(first.empty()) << t.seen();
  t.type("\x04");  // Ctrl-D
  EXPECT_EQ(t.exit_code(), 0) << t.seen();
  // The same conversation, rendered by the template (which trims what was
  // said), through weir run.
  std::string said = first;
  while (!said.empty() && std::isspace(static_cast<unsigned char>(said.back()))) said.pop_back();
  while (!said.empty() && std::isspace(static_cast<unsigned char>(said.front()))) said.erase(0, 1);
  const std::string convo = "<bos><start_of_turn>user\nName a fruit.<end_of_turn>\n<start_of_turn>model\n" + said +
                            "<end_of_turn>\n<start_of_turn>user\nAnd a color?<end_of_turn>\n<start_of_turn>model\n";
  const CliResult r = run_weir("run -m " + shell_quote(model) + " -p " + shell_quote(convo) +
                               " --no-bos --temp 0 -n 12 -t 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(second, r.out) << t.seen();
}

TEST(Chat, CtrlCStopsTheAnswerNotTheProgram) {
  WEIR_TINY_MODEL(dir, "llama3", "chat-ctrl-c");
  const std::string tmpl = own_dir() + "/chatml.jinja";
  {
    std::ofstream f(tmpl);
    f << "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:";
  }
  // An answer that would run for 60,000 tokens, until Ctrl-C.
  Terminal t({weir_bin(), "chat", "-m", dir + "/llama3.gguf", "--chat-template-file", tmpl, "-c", "60000", "-t", "2",
              "--ignore-eos"});
  ASSERT_TRUE(t.wait_for("> ", 0)) << t.seen();
  t.type("hello\n");
  ASSERT_TRUE(t.wait_for("hello", 0));
  const size_t at = t.seen().size();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // well into the answer
  t.type("\x03");  // Ctrl-C
  ASSERT_TRUE(t.wait_for("(stopped)", at, 30)) << t.seen().substr(at, 400);
  ASSERT_TRUE(t.wait_for("> ", t.seen().find("(stopped)"))) << "no prompt after the stop";
  t.type("/clear\n");
  ASSERT_TRUE(t.wait_for("(conversation cleared)", at));
  t.type("\x04");
  EXPECT_EQ(t.exit_code(), 0);
}

TEST(Chat, BadTemplateAndNoTemplateAreClearErrors) {
  WEIR_TINY_MODEL(dir, "llama3", "chat-errors");
  const std::string bad = own_dir() + "/bad.jinja";
  {
    std::ofstream f(bad);
    f << "{% include 'x' %}";
  }
  CliResult r = run_weir("chat -m " + shell_quote(dir + "/llama3.gguf") + " --chat-template-file " + shell_quote(bad) + " </dev/null");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("include"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("line 1"), std::string::npos) << r.err;
  // Sampling flags are checked as weir run checks them: a usage error naming the flag.
  r = run_weir("chat -m " + shell_quote(dir + "/llama3.gguf") + " --top-p 0 </dev/null");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--top-p"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace weir::test
