// weir serve's /v1/embeddings as a user starts it: on the real Gemma 3
// (CPU), driven by the official openai Python package
// (tests/server/openai_embeddings.py: the response's shape, every form of
// input, base64, normalize, dimensions, the errors, the API key, and
// embeddings beside streaming chat answers); then with
// --accept-unknown-fields an unknown field is taken. And a BERT encoder
// (weir synth's tiny bert, tests/server/openai_encoder_embeddings.py): its
// vectors against float64 numpy, chat and completions refused with 400.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <utility>

#include "test_env.h"
#include "tools/serve_process.h"

#ifndef WEIR_OPENAI_CLIENT
#define WEIR_OPENAI_CLIENT "tests/server/openai_client.py"
#endif

namespace weir::test {
namespace {

// tests/server/openai_embeddings.py, beside the client script CMake names.
std::string embeddings_script() {
  const std::string client = WEIR_OPENAI_CLIENT;
  return client.substr(0, client.find_last_of('/') + 1) + "openai_embeddings.py";
}

std::pair<int, std::string> run_script(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  return {pclose(p), out};
}

TEST(ServeEmbeddings, OpenAiClientOnTheRealModel) {
  WEIR_REQUIRE_MODEL(model);
  if (std::system("python3 -c 'import openai' >/dev/null 2>&1") != 0)
    FAIL() << "the openai package is missing (scripts/setup.sh installs it)";
  {
    ServeProcess serve(model, {"--api-key", "test-key"});
    ASSERT_TRUE(serve.wait_up()) << "weir serve did not come up";
    const auto [rc, out] = run_script("python3 " + embeddings_script() + " " + serve.base() + "/v1 test-key");
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("ok"), std::string::npos) << out;
    std::printf("%s", out.c_str());
    const int st = serve.stop();
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
  }
  ServeProcess lenient(model, {"--accept-unknown-fields"});
  ASSERT_TRUE(lenient.wait_up()) << "weir serve did not come up";
  const auto [rc, out] = run_script("python3 " + embeddings_script() + " " + lenient.base() + "/v1 none --accept-unknown");
  EXPECT_EQ(rc, 0) << out;
  lenient.stop();
}

TEST(ServeEmbeddings, BertEncoderThroughTheOpenAiClient) {
  if (std::system("python3 -c 'import openai, numpy, gguf' >/dev/null 2>&1") != 0)
    FAIL() << "the openai, numpy or gguf package is missing (scripts/setup.sh installs them)";
  const std::string model = own_dir() + "/serve-bert.gguf";
  const auto [src, sout] = run_script(weir_bin() + " synth --arch bert --preset tiny --type F16 -o " + model);
  ASSERT_EQ(src, 0) << sout;
  ServeProcess serve(model, {});
  ASSERT_TRUE(serve.wait_up()) << "weir serve did not come up";
  const std::string script = embeddings_script();
  const std::string encoder = script.substr(0, script.find_last_of('/') + 1) + "openai_encoder_embeddings.py";
  const auto [rc, out] = run_script("python3 " + encoder + " " + serve.base() + "/v1 " + model);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("ok"), std::string::npos) << out;
  std::printf("%s", out.c_str());
  const int st = serve.stop();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
}

}  // namespace
}  // namespace weir::test
