// Where tests find their inputs: compiled-in defaults from tests/CMakeLists.txt,
// overridable by environment variables of the same names without DEFAULT_.
#pragma once
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace weir::test {

inline std::string env_or(const char* name, const char* def) {
  const char* v = std::getenv(name);
  return v && *v ? v : def;
}
#ifndef WEIR_DEFAULT_TEST_MODEL  // set by tests/CMakeLists.txt
#define WEIR_DEFAULT_TEST_MODEL ""
#define WEIR_DEFAULT_REF_DIR "../shared/ref"
#define WEIR_DEFAULT_TEST_DATA "tests/data"
#define WEIR_DEFAULT_BIN "build/weir"
#endif
#ifndef WEIR_DEFAULT_PYTHON
#define WEIR_DEFAULT_PYTHON "python3"
#define WEIR_DEFAULT_REF_SCRIPTS "tests/reference"
#define WEIR_DEFAULT_TEST_TMP "/tmp/weir-tests"
#endif
inline std::string ref_dir() { return env_or("WEIR_REF_DIR", WEIR_DEFAULT_REF_DIR); }
inline std::string data_dir() { return env_or("WEIR_TEST_DATA", WEIR_DEFAULT_TEST_DATA); }
inline std::string weir_bin() { return env_or("WEIR_BIN", WEIR_DEFAULT_BIN); }
inline std::string python() { return env_or("WEIR_PYTHON", WEIR_DEFAULT_PYTHON); }
inline std::string ref_scripts() { return env_or("WEIR_REF_SCRIPTS", WEIR_DEFAULT_REF_SCRIPTS); }
inline std::string test_tmp() { return env_or("WEIR_TEST_TMP", WEIR_DEFAULT_TEST_TMP); }
inline std::string model_path() { return env_or("WEIR_TEST_MODEL", WEIR_DEFAULT_TEST_MODEL); }

// A folder of the current test's own, made empty on first use: CTest runs
// each test case as its own process, in parallel with others, so a fixed
// name under testing::TempDir() would be shared by several of them. Removed
// when the test passes (kept for a look when it fails).
inline std::string own_dir() {
  struct Remover : testing::EmptyTestEventListener {
    std::string dir;
    void OnTestEnd(const testing::TestInfo& info) override {
      if (!dir.empty() && info.result() && info.result()->Passed()) {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
      }
      dir.clear();
    }
  };
  static Remover* remover = [] {
    auto* r = new Remover;
    testing::UnitTest::GetInstance()->listeners().Append(r);  // gtest owns it
    return r;
  }();
  const testing::TestInfo* info = testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "outside-tests";
  for (char& c : name)
    if (c == '/') c = '_';
  std::string base = testing::TempDir();
  if (!base.empty() && base.back() != '/') base += '/';
  const std::string dir = base + "weir-" + name + "-" + std::to_string(::getpid());
  if (remover->dir != dir) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    std::filesystem::create_directories(dir);
    remover->dir = dir;
  }
  return dir;
}

// A folder for what several tests of one process share (a model made once
// for all of them): named by the process, removed when it exits.
inline std::string process_dir() {
  static const std::string dir = [] {
    std::string base = testing::TempDir();
    if (!base.empty() && base.back() != '/') base += '/';
    const std::string d = base + "weir-process-" + std::to_string(::getpid());
    std::filesystem::create_directories(d);
    static const std::string to_remove = d;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(to_remove, ec);
    });
    return d;
  }();
  return dir;
}

}  // namespace weir::test

// Skips the current test when the real Gemma 3 model is not present.
#define WEIR_REQUIRE_MODEL(path_var)                                          \
  const std::string path_var = ::weir::test::model_path();                    \
  if (path_var.empty() || !std::filesystem::exists(path_var))                 \
  GTEST_SKIP() << "model not found (run scripts/fetch-model.sh): " << path_var
