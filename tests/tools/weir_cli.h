// Runs the real weir binary for the tools tests: exit code, stdout and stderr.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "test_env.h"

namespace weir::test {

struct CliResult {
  int code = -1;
  std::string out, err;
};

// `weir ARGS` through the shell (ARGS is shell text: quote what needs it).
inline CliResult run_weir(const std::string& args) {
  static int counter = 0;
  const std::string err_path =
      own_dir() + "/weir-cli-" + std::to_string(counter++) + ".err";
  const std::string cmd = weir_bin() + " " + args + " 2>" + err_path;
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream e(err_path, std::ios::binary);
  std::stringstream ss;
  ss << e.rdbuf();
  r.err = ss.str();
  std::filesystem::remove(err_path);
  return r;
}

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// tests/data: WEIR_TEST_DATA when it points at a folder, else next to this file.
inline std::string test_data_dir() {
  const std::string d = data_dir();
  if (std::filesystem::is_directory(d + "/gguf-valid")) return d;
  return (std::filesystem::path(__FILE__).parent_path().parent_path() / "data").string();
}

inline bool python_gguf_available() {
  static const int ok = std::system("python3 -c 'import gguf, numpy' >/dev/null 2>&1") == 0;
  return ok;
}

}  // namespace weir::test
