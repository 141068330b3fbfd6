// Tiny random-weight GGUF models written at test time by
// tests/reference/tiny_models.py (with float64 reference logits for the good
// ones). Each test gets its own folder (name + tag), so tests running in
// parallel never rewrite a file another one has mapped.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string>

#include "test_env.h"

namespace weir::test {

// Writes model `name` into a folder for this (name, tag) and returns it; ""
// with *why set when python lacks numpy/gguf (exit code 77: the caller
// skips) or the script fails.
inline std::string make_tiny_model(const std::string& name, const std::string& tag, std::string* why,
                                   bool* skip) {
  std::string dir = own_dir() + "/tiny/" + name;
  if (!tag.empty()) dir.append(".").append(tag);
  std::filesystem::create_directories(dir);
  auto quoted = [](const std::string& s) {
    std::string r(1, '\'');
    r.append(s).push_back('\'');
    return r;
  };
  std::string cmd = quoted(python());
  for (const std::string& arg : {ref_scripts() + "/tiny_models.py", dir, name}) cmd.append(" ").append(quoted(arg));
  cmd.append(" 2>").append(quoted(dir + "/stderr.txt"));
  const int rc = std::system(cmd.c_str());
  const int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  *skip = code == 77;
  if (code != 0) {
    *why = cmd + " exited with " + std::to_string(code) + " (see " + dir + "/stderr.txt)";
    return "";
  }
  return dir;
}

}  // namespace weir::test

// Sets dir_var to the folder of tiny model `name`, or skips / fails the test.
#define WEIR_TINY_MODEL(dir_var, name, tag)                             \
  std::string dir_var;                                                  \
  {                                                                     \
    std::string why_;                                                   \
    bool skip_ = false;                                                 \
    dir_var = ::weir::test::make_tiny_model(name, tag, &why_, &skip_);  \
    if (skip_) GTEST_SKIP() << "python lacks numpy or gguf: " << why_;  \
    ASSERT_FALSE(dir_var.empty()) << why_;                              \
  }
