// weir serve as a user starts it: on the real Gemma 3 (CPU), driven by the
// official openai Python package (tests/server/openai_client.py: chat,
// streaming, stop strings, completions, errors, 16 streams at once); then
// SIGTERM ends it with code 0.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "test_env.h"
#include "tools/weir_cli.h"

#ifndef WEIR_OPENAI_CLIENT
#define WEIR_OPENAI_CLIENT "tests/server/openai_client.py"
#endif

namespace weir::test {
namespace {

int free_port() {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t n = sizeof a;
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &n);
  close(s);
  return ntohs(a.sin_port);
}

TEST(Serve, OpenAiClientOnTheRealModel) {
  WEIR_REQUIRE_MODEL(model);
  if (std::system("python3 -c 'import openai' >/dev/null 2>&1") != 0)
    FAIL() << "the openai package is missing (scripts/setup.sh installs it)";
  const int port = free_port();
  const std::string err = own_dir() + "/serve.err";
  const pid_t pid = fork();
  if (pid == 0) {
    freopen(err.c_str(), "w", stderr);
    execl(weir_bin().c_str(), "weir", "serve", "-m", model.c_str(), "--port", std::to_string(port).c_str(), "-t", "2",
          "-np", "8", "-c", "4096", "--api-key", "test-key", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Up when /health answers.
  bool up = false;
  for (int i = 0; i < 300 && !up; ++i) {
    up = std::system(("python3 -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:" +
                      std::to_string(port) + "/health', timeout=1)\" >/dev/null 2>&1").c_str()) == 0;
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(up) << "weir serve did not come up";
  const std::string cmd = "python3 " + std::string(WEIR_OPENAI_CLIENT) + " http://127.0.0.1:" + std::to_string(port) +
                          "/v1 test-key 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = pclose(p);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("ok"), std::string::npos) << out;
  std::printf("%s", out.c_str());  // how many of the 16 streams equalled their text alone
  kill(pid, SIGTERM);
  int st = 0;
  waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
}

}  // namespace
}  // namespace weir::test
