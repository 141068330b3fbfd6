// Where tests find their inputs: compiled-in defaults from tests/CMakeLists.txt,
// overridable by environment variables of the same names without DEFAULT_.
#pragma once
#include <gtest/gtest.h>

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

}  // namespace weir::test

// Skips the current test when the real Gemma 3 model is not present.
#define WEIR_REQUIRE_MODEL(path_var)                                          \
  const std::string path_var = ::weir::test::model_path();                    \
  if (path_var.empty() || !std::filesystem::exists(path_var))                 \
  GTEST_SKIP() << "model not found (run scripts/fetch-model.sh): " << path_var
