// weir under mpirun: each process is a rank of the tensor-parallel group.
// Two CPU ranks as processes write the same greedy text as one process
// (and as two ranks as threads); a rank killed mid-run ends the job within
// seconds instead of leaving the other waiting; SIGINT to mpirun stops all.
// Skipped where mpirun is missing or weir was built without MPI.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "model/tiny_models.h"
#include "test_env.h"
#include "tools/weir_cli.h"

namespace {

using weir::test::run_weir;
using weir::test::shell_quote;

std::string mpirun_path() {
  for (const char* p : {"/usr/bin/mpirun", "/usr/local/bin/mpirun"})
    if (access(p, X_OK) == 0) return p;
  return "";
}

bool weir_has_mpi() { return run_weir("--version").out.find("MPI: yes") != std::string::npos; }

#define REQUIRE_MPI()                                                              \
  if (mpirun_path().empty()) GTEST_SKIP() << "no mpirun (apt-get install openmpi-bin)"; \
  if (!weir_has_mpi()) GTEST_SKIP() << "weir built without MPI"

// mpirun's flags for a test: as root if we are, more ranks than cores, no
// network interfaces beyond this host.
std::string mpirun(int n) {
  std::string cmd = mpirun_path() + " --oversubscribe --mca btl self,vader -np " + std::to_string(n);
  if (geteuid() == 0) cmd += " --allow-run-as-root";
  return cmd;
}

std::string shell(const std::string& cmd, int* code) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  *code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

TEST(Mpi, TwoProcessesWriteWhatOneWrites) {
  REQUIRE_MPI();
  WEIR_TINY_MODEL(dir, "qwen2", "mpi");
  const std::string args = " run -m " + shell_quote(dir + "/qwen2.gguf") + " -p 'hello world' -n 12 --temp 0 -t 1";
  const weir::test::CliResult one = run_weir(args);
  ASSERT_EQ(one.code, 0) << one.err;
  const weir::test::CliResult threads = run_weir(args + " --tp 2");
  EXPECT_EQ(threads.code, 0) << threads.err;
  EXPECT_EQ(threads.out, one.out);
  int code = -1;
  const std::string err = weir::test::own_dir() + "/mpi.err";
  const std::string out = shell(mpirun(2) + " " + weir::test::weir_bin() + args + " 2>" + shell_quote(err), &code);
  std::ifstream e(err);
  const std::string err_text((std::istreambuf_iterator<char>(e)), std::istreambuf_iterator<char>());
  EXPECT_EQ(code, 0) << err_text;
  // (mpirun gives rank 0 a terminal for its output: weir ends with a newline there.)
  EXPECT_EQ(out.substr(0, one.out.size()), one.out) << err_text;
  EXPECT_LE(out.size(), one.out.size() + 1);
  // Rank 0 alone speaks: one stats line.
  size_t lines = 0;
  for (size_t at = err_text.find("generation"); at != std::string::npos; at = err_text.find("generation", at + 1))
    ++lines;
  EXPECT_EQ(lines, 1u) << err_text;
  // --tp that is not the number of processes: a clear error.
  const std::string bad = shell(mpirun(2) + " " + weir::test::weir_bin() + args + " --tp 3 2>&1", &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(bad.find("--tp 3: mpirun started 2 processes"), std::string::npos) << bad;
}

// The pids of mpirun's children running weir.
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& d : std::filesystem::directory_iterator("/proc")) {
    const std::string name = d.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(d.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos || line.find("(weir)") == std::string::npos) continue;
    char state;
    int ppid = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) == 2 && ppid == parent)
      out.push_back(pid_t(std::stoi(name)));
  }
  return out;
}

// Whether pid still runs (a zombie does not: in a container nobody may reap
// mpirun's orphans).
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

// Starts mpirun -np 2 on a long generation; returns its pid once both
// ranks are generating.
pid_t start_long_run(const std::string& model, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (!freopen("/dev/null", "w", stdout) || !freopen(log.c_str(), "w", stderr)) _exit(99);
    const std::string cmd = "exec " + mpirun(2) + " " + weir::test::weir_bin() + " run -m " + shell_quote(model) +
                            " -p hello -n 1000000 --ignore-eos --temp 0 -t 1 -c 200000";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(98);
  }
  for (int i = 0; i < 100 && children_of(pid).size() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::milliseconds(800));  // generating by now
  return pid;
}

// Waits up to `limit` for pid; true when it ended (its status in *st).
bool ended_within(pid_t pid, std::chrono::seconds limit, int* st) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (waitpid(pid, st, WNOHANG) == pid) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGKILL);
  waitpid(pid, st, 0);
  return false;
}

TEST(Mpi, AKilledRankEndsTheJob) {
  REQUIRE_MPI();
  WEIR_TINY_MODEL(dir, "qwen2", "mpi-kill");
  const pid_t job = start_long_run(dir + "/qwen2.gguf", weir::test::own_dir() + "/kill.err");
  const std::vector<pid_t> ranks = children_of(job);
  ASSERT_EQ(ranks.size(), 2u) << "mpirun's ranks not found";
  kill(ranks[1], SIGKILL);
  int st = 0;
  ASSERT_TRUE(ended_within(job, std::chrono::seconds(20), &st)) << "the job went on without a rank";
  EXPECT_FALSE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (pid_t r : ranks) EXPECT_FALSE(alive(r)) << "rank " << r << " left running";
}

TEST(Mpi, CtrlCStopsEveryRank) {
  REQUIRE_MPI();
  WEIR_TINY_MODEL(dir, "qwen2", "mpi-int");
  const pid_t job = start_long_run(dir + "/qwen2.gguf", weir::test::own_dir() + "/int.err");
  const std::vector<pid_t> ranks = children_of(job);
  ASSERT_EQ(ranks.size(), 2u);
  kill(job, SIGINT);
  int st = 0;
  ASSERT_TRUE(ended_within(job, std::chrono::seconds(20), &st)) << "SIGINT did not stop the job";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (pid_t r : ranks) EXPECT_FALSE(alive(r)) << "rank " << r << " still runs";
}

}  // namespace
