// Runs a program as a user's shell would, with what a hardening test needs:
// stdin/stdout/stderr from or to chosen files (or a pipe whose reader is
// gone), resource limits (address space, file size), a signal sent once a
// marker shows up on stderr or a file appears, and a time bound (killed and
// reported past it).
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace weir::test {

struct ProcOptions {
  std::string stdin_path = "/dev/null";
  std::string stdout_path;  // "": captured
  std::string stderr_path;  // "": captured
  bool stdout_broken_pipe = false;  // stdout: a pipe whose read end is closed
  uint64_t address_space_limit = 0;  // RLIMIT_AS in bytes (0: none)
  uint64_t file_size_limit = 0;      // RLIMIT_FSIZE in bytes (0: none)
  int signal = 0;                    // sent once ...
  std::string signal_on_stderr;      // ... this text is on stderr, or
  std::string signal_on_file;        // ... this file exists, or
  int signal_after_ms = -1;          // ... this long after the start (-1: never)
  int signal_delay_ms = 0;           // extra wait after the trigger
  double timeout_s = 120;
};

struct ProcResult {
  int exit_code = -1;    // -1: not exited normally
  int term_signal = 0;   // the signal that killed it
  bool timed_out = false;
  bool signalled = false;       // the signal of ProcOptions was sent
  double seconds = 0;           // start to exit
  double seconds_after_signal = 0;
  std::string out, err;
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// argv[0] is the program's path; captured output is kept in scratch (a
// folder apart from the one whose files a test checks).
inline ProcResult run_process(const std::vector<std::string>& argv, const ProcOptions& o, const std::string& scratch) {
  using Clock = std::chrono::steady_clock;
  const std::string out_path = o.stdout_path.empty() ? scratch + "/.stdout" : o.stdout_path;
  const std::string err_path = o.stderr_path.empty() ? scratch + "/.stderr" : o.stderr_path;
  int pipefd[2] = {-1, -1};
  if (o.stdout_broken_pipe && ::pipe(pipefd) != 0) return {};
  ProcResult r;
  const auto t0 = Clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) return r;
  if (pid == 0) {
    auto redirect = [](const std::string& path, int flags, int fd) {
      const int f = ::open(path.c_str(), flags, 0644);
      if (f < 0 || ::dup2(f, fd) < 0) _exit(120);
      ::close(f);
    };
    redirect(o.stdin_path, O_RDONLY, 0);
    if (o.stdout_broken_pipe) {
      ::close(pipefd[0]);
      ::dup2(pipefd[1], 1);
      ::close(pipefd[1]);
    } else {
      redirect(out_path, O_WRONLY | O_CREAT | O_TRUNC, 1);
    }
    redirect(err_path, O_WRONLY | O_CREAT | O_TRUNC, 2);
    if (o.address_space_limit) {
      struct rlimit rl = {rlim_t(o.address_space_limit), rlim_t(o.address_space_limit)};
      ::setrlimit(RLIMIT_AS, &rl);
    }
    if (o.file_size_limit) {
      struct rlimit rl = {rlim_t(o.file_size_limit), rlim_t(o.file_size_limit)};
      ::setrlimit(RLIMIT_FSIZE, &rl);
    }
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGXFSZ}) ::signal(sig, SIG_DFL);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    _exit(121);
  }
  if (o.stdout_broken_pipe) {
    ::close(pipefd[1]);
    ::close(pipefd[0]);  // the reader is gone before the program writes
  }
  Clock::time_point triggered{}, signalled{};
  bool trigger_seen = false;
  int status = 0;
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    if (elapsed > o.timeout_s) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      r.timed_out = true;
      break;
    }
    if (o.signal && !r.signalled) {
      if (!trigger_seen) {
        if (!o.signal_on_stderr.empty()) {
          trigger_seen = read_file(err_path).find(o.signal_on_stderr) != std::string::npos;
        } else if (!o.signal_on_file.empty()) {
          trigger_seen = std::filesystem::exists(o.signal_on_file);
        } else if (o.signal_after_ms >= 0) {
          trigger_seen = elapsed * 1000 >= o.signal_after_ms;
        }
        if (trigger_seen) triggered = Clock::now();
      }
      if (trigger_seen && Clock::now() - triggered >= std::chrono::milliseconds(o.signal_delay_ms)) {
        ::kill(pid, o.signal);
        r.signalled = true;
        signalled = Clock::now();
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const auto t1 = Clock::now();
  r.seconds = std::chrono::duration<double>(t1 - t0).count();
  if (r.signalled) r.seconds_after_signal = std::chrono::duration<double>(t1 - signalled).count();
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.term_signal = WTERMSIG(status);
  if (o.stdout_path.empty() && !o.stdout_broken_pipe) r.out = read_file(out_path);
  if (o.stderr_path.empty()) r.err = read_file(err_path);
  std::error_code ec;
  std::filesystem::remove(scratch + "/.stdout", ec);
  std::filesystem::remove(scratch + "/.stderr", ec);
  return r;
}

}  // namespace weir::test
