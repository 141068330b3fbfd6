// weir serve as a user starts it, in a process of its own, until SIGTERM:
// for tests that talk to it over HTTP (tests/tools/serve_*_test.cpp).
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "test_env.h"

namespace weir::test {

inline int free_port() {
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

// weir serve on the real model, as a user starts it, until SIGTERM.
struct ServeProcess {
  pid_t pid = -1;
  int port = 0;
  std::string err;  // its stderr's file
  explicit ServeProcess(const std::string& model, std::vector<std::string> extra = {}) {
    port = free_port();
    err = own_dir() + "/serve.err";
    std::vector<std::string> args = {"weir", "serve", "-m", model, "--port", std::to_string(port), "-t", "2", "-np", "8",
                                     "-c", "4096"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid = fork();
    if (pid == 0) {
      freopen(err.c_str(), "w", stderr);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(weir_bin().c_str(), argv.data());
      _exit(127);
    }
  }
  // Up when /health answers.
  bool wait_up() const {
    for (int i = 0; i < 300; ++i) {
      if (std::system(("python3 -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:" +
                       std::to_string(port) + "/health', timeout=1)\" >/dev/null 2>&1")
                          .c_str()) == 0)
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  std::string base() const { return "http://127.0.0.1:" + std::to_string(port); }
  // SIGTERM; the exit status.
  int stop() {
    kill(pid, SIGTERM);
    int st = 0;
    waitpid(pid, &st, 0);
    pid = -1;
    return st;
  }
  // Its resident memory (VmRSS), in bytes; 0 once it is gone.
  size_t rss() const {
    FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/status").c_str(), "r");
    if (!f) return 0;
    char line[256];
    size_t kib = 0;
    while (std::fgets(line, sizeof line, f))
      if (std::string(line).rfind("VmRSS:", 0) == 0) kib = std::strtoull(line + 6, nullptr, 10);
    std::fclose(f);
    return kib << 10;
  }
  ~ServeProcess() {
    if (pid > 0) stop();
  }
};

}  // namespace weir::test
