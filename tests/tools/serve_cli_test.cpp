// weir serve as a user starts it: on the real Gemma 3 (CPU), driven by the
// official openai Python package (tests/server/openai_client.py: chat,
// streaming, stop strings, log-probabilities, penalties, the prefix cache,
// completions, errors, 16 streams at once); then SIGTERM ends it with code
// 0. The chat page at / in headless Chromium.
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
#include "tools/serve_process.h"
#include "tools/weir_cli.h"

#include <string>
#include <utility>
#include <vector>

#ifndef WEIR_OPENAI_CLIENT
#define WEIR_OPENAI_CLIENT "tests/server/openai_client.py"
#endif
#ifndef WEIR_CHAT_PAGE_TEST
#define WEIR_CHAT_PAGE_TEST "tests/server/chat_page_test.py"
#endif
#ifndef WEIR_TEST_ARTIFACTS
#define WEIR_TEST_ARTIFACTS "test-artifacts"
#endif

namespace weir::test {
namespace {

// Runs a command; its exit code and output.
std::pair<int, std::string> run(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = pclose(p);
  return {rc, out};
}

TEST(Serve, OpenAiClientOnTheRealModel) {
  WEIR_REQUIRE_MODEL(model);
  if (std::system("python3 -c 'import openai' >/dev/null 2>&1") != 0)
    FAIL() << "the openai package is missing (scripts/setup.sh installs it)";
  ServeProcess serve(model, {"--api-key", "test-key"});
  ASSERT_TRUE(serve.wait_up()) << "weir serve did not come up";
  const auto [rc, out] = run("python3 " + std::string(WEIR_OPENAI_CLIENT) + " " + serve.base() + "/v1 test-key");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("ok"), std::string::npos) << out;
  std::printf("%s", out.c_str());  // how many of the 16 streams equalled their text alone
  const int st = serve.stop();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
}

// Tool calling as the openai package runs it (tests/server/
// openai_tools_client.py, beside openai_client.py): tools sent, the answer
// read, the call and its result sent back and answered, whole and streamed.
TEST(Serve, OpenAiToolCallingOnTheRealModel) {
  WEIR_REQUIRE_MODEL(model);
  if (std::system("python3 -c 'import openai' >/dev/null 2>&1") != 0)
    FAIL() << "the openai package is missing (scripts/setup.sh installs it)";
  std::string script = WEIR_OPENAI_CLIENT;
  script = script.substr(0, script.rfind('/') + 1) + "openai_tools_client.py";
  ServeProcess serve(model, {"--api-key", "test-key"});
  ASSERT_TRUE(serve.wait_up()) << "weir serve did not come up";
  const auto [rc, out] = run("python3 " + script + " " + serve.base() + "/v1 test-key");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("ok"), std::string::npos) << out;
  std::printf("%s", out.c_str());
  const int st = serve.stop();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
}

// gpt-oss's Harmony format as the openai package reads it (tests/server/
// openai_harmony_client.py): the real model with gpt-oss's chat template,
// a grammar making it write a Harmony answer; the analysis comes back as
// reasoning_content, the final text as the content, a message to a
// function as a tool call, whole and streamed, and the turns sent back
// render.
TEST(Serve, HarmonyAnswersThroughTheOpenAiPackage) {
  WEIR_REQUIRE_MODEL(model);
  if (std::system("python3 -c 'import openai' >/dev/null 2>&1") != 0)
    FAIL() << "the openai package is missing (scripts/setup.sh installs it)";
  std::string script = WEIR_OPENAI_CLIENT;
  script = script.substr(0, script.rfind('/') + 1) + "openai_harmony_client.py";
  ServeProcess serve(model, {"--api-key", "test-key", "--chat-template-file", data_dir() + "/gpt-oss-chat-template.jinja"});
  ASSERT_TRUE(serve.wait_up()) << "weir serve did not come up";
  const auto [rc, out] = run("python3 " + script + " " + serve.base() + "/v1 test-key");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("ok"), std::string::npos) << out;
  const int st = serve.stop();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
}

// The chat page at / in headless Chromium (tests/server/chat_page_test.py):
// a message typed, the answer streamed in, the API's answer; the screenshot
// stays in the build's test-artifacts/.
TEST(Serve, ChatPageInHeadlessChromium) {
  WEIR_REQUIRE_MODEL(model);
  const char* chromium = "/usr/bin/chromium-headless-shell";
  if (access(chromium, X_OK) != 0) GTEST_SKIP() << "no " << chromium << " (scripts/setup.sh installs it)";
  if (std::system("python3 -c 'import websocket' >/dev/null 2>&1") != 0)
    FAIL() << "the websocket-client package is missing (scripts/setup.sh installs it)";
  ServeProcess serve(model);
  ASSERT_TRUE(serve.wait_up()) << "weir serve did not come up";
  const auto [rc, out] = run("python3 " + std::string(WEIR_CHAT_PAGE_TEST) + " " + serve.base() + " " + chromium + " " +
                             std::string(WEIR_TEST_ARTIFACTS) + "/chat_page.png");
  EXPECT_EQ(rc, 0) << out;
  std::printf("%s", out.c_str());
}

}  // namespace
}  // namespace weir::test
