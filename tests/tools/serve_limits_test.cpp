// weir serve on the real Gemma 3 (CPU), played against as an adversary
// would: idle and slowloris connections, huge bodies (chunked or not) and
// huge /tokenize texts leave /health answering within a second and the
// server's resident memory within 64 MB of where it was; a client that
// leaves a whole (non-streaming) answer frees its slot within a second;
// SIGTERM during a long generation or a long chat template render ends the
// server within 2 s; every error is an OpenAI-shaped JSON body with no
// internal header and no path of the host.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <fstream>
#include <regex>
#include <thread>
#include <vector>

#include "server/raw_http.h"
#include "test_env.h"
#include "tools/serve_process.h"
#include "tools/weir_cli.h"

namespace weir::test {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// GET /health on a fresh connection: seconds to the answer (99 without one).
double health_seconds(int port) {
  const auto t0 = Clock::now();
  const RawResponse r = http_exchange(port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 10);
  return r.status == 200 ? seconds_since(t0) : 99;
}

// A gauge of /metrics (-1 when absent).
double metric(int port, const std::string& name) {
  const RawResponse r = http_exchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 10);
  std::smatch m;
  if (!std::regex_search(r.body, m, std::regex("\n" + name + " ([0-9.e+-]+)"))) return -1;
  return std::stod(m[1].str());
}

// While an attack runs: /health every 100 ms (the slowest answer) and the
// server's memory (the highest).
struct Watch {
  const ServeProcess& s;
  std::atomic<bool> done{false};
  double worst_health = 0;
  size_t peak_rss = 0;
  int probes = 0;
  std::thread t;
  explicit Watch(const ServeProcess& s) : s(s) {
    t = std::thread([this] {
      while (!done) {
        worst_health = std::max(worst_health, health_seconds(this->s.port));
        peak_rss = std::max(peak_rss, this->s.rss());
        ++probes;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }
  void stop() {
    done = true;
    if (t.joinable()) t.join();
  }
  ~Watch() { stop(); }
};

std::string chat_body(const std::string& content, const std::string& extra = "") {
  return R"({"messages": [{"role": "user", "content": ")" + content + R"("}], "max_tokens": 4, "temperature": 0)" +
         extra + "}";
}

class ServeLimits : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = model_path();
    if (model_.empty() || access(model_.c_str(), R_OK) != 0) GTEST_SKIP() << "no model at " << model_;
  }
  std::string model_;
};

TEST_F(ServeLimits, AttacksLeaveHealthFastAndMemoryFlat) {
  ServeProcess s(model_, {"-np", "4"});
  ASSERT_TRUE(s.wait_up());
  // Warm: a few answers, so the memory that serving takes is taken.
  for (int i = 0; i < 4; ++i) ASSERT_EQ(http_exchange(s.port, json_request("POST", "/v1/chat/completions", chat_body("hi"))).status, 200);
  const size_t base = s.rss();
  Watch w(s);

  // 500 connections that send nothing, 100 that send a header line every
  // 2 s and never finish their head.
  std::vector<int> idle, drip;
  for (int i = 0; i < 500; ++i) idle.push_back(connect_local(s.port));
  for (int i = 0; i < 100; ++i) {
    drip.push_back(connect_local(s.port));
    send_all(drip.back(), "POST /v1/completions HTTP/1.1\r\nHost: x\r\n");
  }
  for (int round = 0; round < 3; ++round) {
    for (int fd : drip) send_all(fd, "X-Drip: " + std::to_string(round) + "\r\n");
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }

  // 8 huge /tokenize requests at once: 14 MB declared (refused before it is
  // read), 100 MB chunked (refused at the limit), and 3.9 MB of text within
  // the body limit but far over the token limit.
  std::vector<std::thread> huge;
  std::atomic<int> refused{0};
  for (int i = 0; i < 8; ++i)
    huge.emplace_back([&, i] {
      const int fd = connect_local(s.port);
      if (i % 3 == 0) {
        send_all(fd, "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 14000000\r\n\r\n");
        send_all(fd, "{\"content\": \"" + std::string(1 << 20, 'a'));
      } else if (i % 3 == 1) {
        send_all(fd, "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
        const std::string chunk = "100000\r\n" + std::string(0x100000, 'a') + "\r\n";
        for (int k = 0; k < 100 && send_all(fd, chunk); ++k) {
        }
      } else {
        send_all(fd, json_request("POST", "/tokenize", "{\"content\": \"" + std::string(3900000, 'a') + "\"}"));
      }
      const RawResponse r = read_response(fd, 30);
      if (r.status == 413 || r.status == 400) ++refused;
      ::close(fd);
    });
  for (auto& t : huge) t.join();
  w.stop();
  for (int fd : idle) ::close(fd);
  for (int fd : drip) ::close(fd);

  std::printf("health: worst %.3f s over %d probes; RSS %zu MiB before, peak %zu MiB\n", w.worst_health, w.probes,
              base >> 20, w.peak_rss >> 20);
  EXPECT_GT(w.probes, 20);
  EXPECT_LT(w.worst_health, 1.0) << "/health was slow during the attack";
  EXPECT_LT(w.peak_rss, base + (64u << 20)) << "memory grew by " << ((w.peak_rss - base) >> 20) << " MiB";
  EXPECT_EQ(refused.load(), 8) << "a huge request was not refused";
  EXPECT_GE(metric(s.port, "weir_http_header_timeouts_total"), 0);
  EXPECT_EQ(http_exchange(s.port, json_request("POST", "/v1/chat/completions", chat_body("still there?"))).status, 200);
  const int st = s.stop();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
}

TEST_F(ServeLimits, TooManyConnectionsCloseTheOldestIdleOnes) {
  ServeProcess s(model_, {"--max-connections", "50"});
  ASSERT_TRUE(s.wait_up());
  std::vector<int> fds;
  for (int i = 0; i < 200; ++i) fds.push_back(connect_local(s.port));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_LT(health_seconds(s.port), 1.0);
  EXPECT_GE(metric(s.port, "weir_http_connections_evicted_total"), 150);
  EXPECT_LE(metric(s.port, "weir_http_connections"), 51);
  for (int fd : fds) ::close(fd);
}

TEST_F(ServeLimits, NonStreamingClientThatLeavesFreesItsSlot) {
  ServeProcess s(model_, {"-np", "1"});
  ASSERT_TRUE(s.wait_up());
  const int fd = connect_local(s.port);
  send_all(fd, json_request("POST", "/v1/completions",
                            R"({"prompt": "Once upon a time", "max_tokens": 3000, "ignore_eos": true, "temperature": 0})"));
  for (int i = 0; i < 100 && metric(s.port, "weir_running") != 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(metric(s.port, "weir_running"), 1) << "the request did not start";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::close(fd);
  const auto t0 = Clock::now();
  while (metric(s.port, "weir_running") != 0 && seconds_since(t0) < 5) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double freed = seconds_since(t0);
  std::printf("slot free %.3f s after the client left\n", freed);
  EXPECT_LT(freed, 1.0);
  // The one slot serves the next request at once.
  const auto t1 = Clock::now();
  EXPECT_EQ(http_exchange(s.port, json_request("POST", "/v1/chat/completions", chat_body("next"))).status, 200);
  EXPECT_LT(seconds_since(t1), 5.0);
}

// SIGTERM while a whole answer, a stream and a chat template's render run:
// the server ends within 2 s with code 0, and the clients get an ending.
TEST_F(ServeLimits, SigtermStopsLongWorkWithinTwoSeconds) {
  const std::string slow = own_dir() + "/slow.jinja";
  std::ofstream(slow) << "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x";
  ServeProcess s(model_, {"-np", "4", "--chat-template-file", slow, "--template-max-work", "1000000000000"});
  ASSERT_TRUE(s.wait_up());
  const int whole = connect_local(s.port), stream = connect_local(s.port), render = connect_local(s.port);
  send_all(whole, json_request("POST", "/v1/completions", R"({"prompt": "a", "max_tokens": 3000, "ignore_eos": true})"));
  send_all(stream, json_request("POST", "/v1/completions",
                                R"({"prompt": "b", "max_tokens": 3000, "ignore_eos": true, "stream": true})"));
  send_all(render, json_request("POST", "/v1/chat/completions", chat_body("c")));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  const auto t0 = Clock::now();
  const int st = s.stop();
  const double took = seconds_since(t0);
  std::printf("stopped %.3f s after SIGTERM\n", took);
  EXPECT_LT(took, 2.0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
  const RawResponse w = read_response(whole, 2);
  EXPECT_EQ(w.status, 503) << w.head << w.body;
  const RawResponse r = read_response(render, 2);
  EXPECT_TRUE(r.status == 400 || r.status == 503) << r.head << r.body;
  ::close(whole);
  ::close(stream);
  ::close(render);
}

TEST_F(ServeLimits, ErrorsAreJsonAndLeakNothing) {
  const std::string dir = own_dir() + "/templates";
  std::filesystem::create_directories(dir);
  const std::string bad = dir + "/refuses.jinja";
  std::ofstream(bad) << "{% if messages[0].content == 'boom' %}{{ raise_exception('no boom') }}{% endif %}"
                        "{% if messages[0].content == 'x' %}{{ no_such_variable.attribute }}{% endif %}"
                        "{% if messages[0].content == 'long' %}{{ messages[0].content * 1000 }}{% endif %}"
                        "{% if messages[0].content.startswith('grow') %}{% set ns = namespace(s='') %}"
                        "{% for i in range(100000) %}{% set ns.s = ns.s ~ messages[0].content %}{% endfor %}{% endif %}"
                        "{{ messages[0].content }}";
  ServeProcess s(model_, {"--chat-template-file", bad, "--template-max-output", "2048", "--max-request-tokens", "64"});
  ASSERT_TRUE(s.wait_up());
  auto check = [&](const RawResponse& r, int status, const std::string& param, const char* what) {
    SCOPED_TRACE(what);
    EXPECT_EQ(r.status, status) << r.head << "\n" << r.body;
    EXPECT_EQ(r.header("EXCEPTION_WHAT"), "") << r.head;
    EXPECT_EQ(r.body.find(dir), std::string::npos) << "the host's path went to the client: " << r.body;
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(r.body)) << r.body;
    ASSERT_TRUE(j.contains("error")) << r.body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_TRUE(j["error"]["type"].is_string());
    if (!param.empty()) {
      EXPECT_EQ(j["error"]["param"], param) << r.body;
    }
  };
  check(http_exchange(s.port, json_request("POST", "/v1/chat/completions", chat_body("hi"), "text/plain")), 415, "", "text/plain");
  check(http_exchange(s.port, json_request("POST", "/v1/chat/completions", chat_body("hi"), "application/x-www-form-urlencoded")),
        415, "", "a form");
  check(http_exchange(s.port, "GET /no/such/thing HTTP/1.1\r\nHost: x\r\n\r\n"), 404, "", "unknown GET");
  const auto empty_at = Clock::now();  // no length, no chunks: no body (not one that ends at close)
  check(http_exchange(s.port, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\r\n"), 400,
        "", "no body");
  EXPECT_LT(seconds_since(empty_at), 2.0);
  check(http_exchange(s.port, json_request("POST", "/v1/unknown", "{}")), 404, "", "unknown POST");
  check(http_exchange(s.port, json_request("POST", "/v1/chat/completions", chat_body("bad \xff byte"))), 400,
        "messages[0].content", "invalid UTF-8");
  check(http_exchange(s.port, json_request("POST", "/v1/chat/completions",
                                      "{\"messages\": " + std::string(100000, '[') + std::string(100000, ']') + "}")),
        400, "", "nesting");
  check(http_exchange(s.port, json_request("POST", "/detokenize", R"({"tokens": [4294976555]})")), 400, "tokens", "2^32 + 9259");
  const RawResponse big = http_exchange(s.port, json_request("POST", "/detokenize", R"({"tokens": [1000000000000]})"));
  check(big, 400, "tokens", "10^12");
  EXPECT_NE(big.body.find("1000000000000"), std::string::npos) << big.body;
  check(http_exchange(s.port, json_request("POST", "/v1/completions", R"({"prompt": [9223372036854775808]})")), 400, "prompt",
        "2^63");
  check(http_exchange(s.port, json_request("POST", "/v1/chat/completions", chat_body("boom"))), 400, "messages", "raise_exception");
  check(http_exchange(s.port, json_request("POST", "/v1/chat/completions", chat_body("x"))), 400, "messages", "render error");
  // The template's limits: its output, its work (a string grown by ~ in a
  // loop is quadratic), each a 400 that names it.
  const RawResponse out = http_exchange(s.port, json_request("POST", "/v1/chat/completions", chat_body("long")));
  check(out, 400, "messages", "template output");
  EXPECT_NE(out.body.find("2048"), std::string::npos) << out.body;
  const auto t0 = Clock::now();
  const RawResponse work =
      http_exchange(s.port, json_request("POST", "/v1/chat/completions", chat_body("grow" + std::string(200, 'g'))));
  check(work, 400, "messages", "template work");
  EXPECT_NE(work.body.find("work"), std::string::npos) << work.body;
  EXPECT_LT(seconds_since(t0), 5.0);
  // The token limit, on /tokenize and on a prompt.
  const std::string words = [] {
    std::string w;
    for (int i = 0; i < 100; ++i) w += " word" + std::to_string(i);
    return w;
  }();
  const RawResponse tk = http_exchange(s.port, json_request("POST", "/tokenize", "{\"content\": \"" + words + "\"}"));
  check(tk, 400, "content", "tokenize over --max-request-tokens");
  EXPECT_NE(tk.body.find("--max-request-tokens"), std::string::npos) << tk.body;
  check(http_exchange(s.port, json_request("POST", "/v1/completions", "{\"prompt\": \"" + words + "\"}")), 400, "prompt",
        "a prompt over --max-request-tokens");
  EXPECT_EQ(http_exchange(s.port, json_request("POST", "/tokenize", R"({"content": "a few words"})")).status, 200);
  EXPECT_EQ(http_exchange(s.port, json_request("POST", "/v1/chat/completions", chat_body("fine"))).status, 200);
}

}  // namespace
}  // namespace weir::test
