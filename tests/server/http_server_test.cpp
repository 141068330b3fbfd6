// The HTTP side on a tiny model (CPU), through cpp-httplib's client as any
// OpenAI client talks to it: whole and streamed answers agree (greedy),
// the shapes hold the fields clients read, errors are OpenAI-shaped 400s
// naming the field, the API key is asked for, and /health, /v1/models,
// /metrics, /tokenize, /detokenize answer.
#include "server/http_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdio>
#include <atomic>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "model/model.h"
#include "model/synth.h"
#include "test_env.h"
#include "tiny_synth.h"

namespace weir::server {
namespace {

using nlohmann::json;

struct Running {
  std::unique_ptr<Model> model;
  CpuBackend cpu{2};
  std::unique_ptr<Session> session;
  std::unique_ptr<ChatTemplate> chat;
  std::unique_ptr<Batcher> engine;
  std::unique_ptr<HttpServer> server;
  std::thread thread;
  int port = 0;

  explicit Running(const std::string& api_key = "", bool open_chat_page = false) {
    model = Model::load(test::synth_tiny("llama", "http"));
    SessionParams sp;
    sp.n_ctx = 512;
    sp.n_batch = 64;
    session = std::make_unique<Session>(*model, cpu, sp);
    chat = std::make_unique<ChatTemplate>("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:",
                                          "test template", model->tokenizer().vocab());
    BatcherOptions eo;
    eo.max_sequences = 4;
    eo.step_tokens = 64;
    engine = std::make_unique<Batcher>(*session, model->tokenizer(), eo);
    engine->start();
    HttpOptions ho;
    ho.port = 0;
    ho.api_key = api_key;
    ho.open_chat_page = open_chat_page;
    ho.model_name = "tiny";
    ho.model_path = "tiny.gguf";
    ho.slots = 3;
    ho.n_ctx = sp.n_ctx;
    server = std::make_unique<HttpServer>(*engine, model->tokenizer(), chat.get(), ho);
    port = server->bind();
    thread = std::thread([this] { server->run(); });
  }
  ~Running() {
    server->stop();
    thread.join();
    engine->stop();
  }
};

const char* kChat = R"({"model": "tiny", "messages": [{"role": "user", "content": "hello there"}],
                        "max_tokens": 12, "temperature": 0, "seed": 1})";

TEST(HttpServer, WholeAndStreamedAnswersAgree) {
  Running r;
  httplib::Client cli("127.0.0.1", r.port);
  auto res = cli.Post("/v1/chat/completions", kChat, "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json whole = json::parse(res->body);
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["model"], "tiny");
  EXPECT_EQ(whole["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(whole["usage"]["completion_tokens"], 12);
  EXPECT_GT(whole["usage"]["prompt_tokens"].get<int>(), 2);
  const std::string text = whole["choices"][0]["message"]["content"];

  json body = json::parse(kChat);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  std::string sse;
  auto sres = cli.Post("/v1/chat/completions", httplib::Headers{}, body.dump(), "application/json");
  ASSERT_TRUE(sres);
  ASSERT_EQ(sres->status, 200);
  sse = sres->body;
  std::string streamed, finish;
  bool saw_done = false, saw_usage = false, saw_role = false;
  for (size_t at = 0; (at = sse.find("data: ", at)) != std::string::npos;) {
    const size_t end = sse.find("\n\n", at);
    const std::string data = sse.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") {
      saw_done = true;
      continue;
    }
    const json c = json::parse(data);
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    if (c["choices"].empty()) {
      saw_usage = true;
      EXPECT_EQ(c["usage"]["completion_tokens"], 12);
      continue;
    }
    const json& d = c["choices"][0]["delta"];
    if (d.contains("role")) saw_role = true;
    if (d.contains("content")) streamed += d["content"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_TRUE(saw_role && saw_done && saw_usage) << sse;
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(streamed, text);

  // The same prompt tokens through /v1/completions give the same text (the
  // chat template adds no BOS here; completions of text would).
  auto tk = cli.Post("/tokenize", R"({"content": "user: hello there\nassistant:"})", "application/json");
  ASSERT_TRUE(tk);
  json comp = {{"prompt", json::parse(tk->body)["tokens"]}, {"max_tokens", 12}, {"temperature", 0}};
  auto cres = cli.Post("/v1/completions", comp.dump(), "application/json");
  ASSERT_TRUE(cres);
  ASSERT_EQ(cres->status, 200) << cres->body;
  EXPECT_EQ(json::parse(cres->body)["choices"][0]["text"], text);
}

TEST(HttpServer, StopStringsEndTheAnswer) {
  Running r;
  httplib::Client cli("127.0.0.1", r.port);
  auto res = cli.Post("/v1/chat/completions", kChat, "application/json");
  ASSERT_TRUE(res);
  const std::string text = json::parse(res->body)["choices"][0]["message"]["content"];
  ASSERT_GE(text.size(), 6u);
  json body = json::parse(kChat);
  body["stop"] = text.substr(3, 3);
  auto s = cli.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(s);
  const json j = json::parse(s->body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][0]["message"]["content"], text.substr(0, text.find(text.substr(3, 3))));
}

// A streaming client that hangs up mid-answer: its job is cancelled and
// its cells come back, while the server goes on serving.
TEST(HttpServer, ClientThatLeavesIsCancelled) {
  Running r;
  httplib::Client cli("127.0.0.1", r.port);
  json body = json::parse(kChat);
  body["max_tokens"] = 400;
  body["stream"] = true;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  size_t chunks = 0;
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 3; };  // then hang up
  cli.send(req);
  EXPECT_GE(chunks, 3u);
  // The job ends as cancelled (not after its 400 tokens); its cells stay
  // only as a prefix for later prompts.
  bool ended = false;
  for (int i = 0; i < 200 && !ended; ++i) {
    const auto st = r.engine->stats();
    ended = st.running == 0 && st.kept_prefixes == 1;
    if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(ended);
  EXPECT_LT(r.engine->stats().generated_tokens, 400u);
  // The same question again: all of its prompt but the last token is reused.
  auto again = cli.Post("/v1/chat/completions", kChat, "application/json");
  ASSERT_TRUE(again);
  ASSERT_EQ(again->status, 200);
  const json u = json::parse(again->body)["usage"];
  EXPECT_EQ(u["prompt_tokens_details"]["cached_tokens"].get<int>(), u["prompt_tokens"].get<int>() - 1);
}

// Log-probabilities, whole and streamed: one entry a token, the chosen
// token's among the alternatives when it is the most likely (greedy).
TEST(HttpServer, Logprobs) {
  Running r;
  httplib::Client cli("127.0.0.1", r.port);
  json body = json::parse(kChat);
  body["logprobs"] = true;
  body["top_logprobs"] = 2;
  auto res = cli.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json whole = json::parse(res->body);
  const json& content = whole["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 12u);
  std::string joined;
  for (const json& t : content) {
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    ASSERT_EQ(t["top_logprobs"].size(), 2u);
    EXPECT_EQ(t["top_logprobs"][0]["token"], t["token"]);
    EXPECT_NEAR(t["top_logprobs"][0]["logprob"].get<double>(), t["logprob"].get<double>(), 1e-6);
    EXPECT_GE(t["top_logprobs"][0]["logprob"].get<double>(), t["top_logprobs"][1]["logprob"].get<double>());
    joined += t["token"].get<std::string>();
  }
  EXPECT_EQ(joined, whole["choices"][0]["message"]["content"].get<std::string>());
  body["stream"] = true;
  auto st = cli.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(st);
  size_t entries = 0;
  for (size_t at = 0; (at = st->body.find("data: {", at)) != std::string::npos; ++at) {
    const size_t end = st->body.find("\n\n", at);
    const json chunk = json::parse(st->body.substr(at + 6, end - at - 6));
    const json& lp = chunk["choices"][0]["logprobs"];
    if (!lp.is_null()) entries += lp["content"].size();
  }
  EXPECT_EQ(entries, 12u);
  // Without logprobs, none come.
  EXPECT_TRUE(json::parse(cli.Post("/v1/chat/completions", kChat, "application/json")->body)["choices"][0]["logprobs"].is_null());
}

size_t rss_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return size_t(resident) * size_t(sysconf(_SC_PAGESIZE));
}

// Memory stays bounded under load: the resident size after 1,000 requests
// (whole and streamed, with log-probabilities, stop strings, errors and
// different prompts, so the prefix cache fills and lets go) is within a few
// MB of what it was after the first 100.
TEST(HttpServer, MemoryStaysBoundedOverAThousandRequests) {
  Running r;
  httplib::Client cli("127.0.0.1", r.port);
  size_t after_100 = 0;
  for (int i = 0; i < 1000; ++i) {
    json body = json::parse(kChat);
    body["messages"][0]["content"] = "question number " + std::to_string(i * 7919 % 1000);
    body["max_tokens"] = 4 + i % 5;
    body["stream"] = i % 2 == 0;
    if (i % 3 == 0) body["logprobs"] = true, body["top_logprobs"] = 2;
    if (i % 5 == 0) body["stop"] = json::array({"a", "e"});
    if (i % 11 == 0) body["temperature"] = "hot";  // a 400
    auto res = cli.Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(res) << "request " << i;
    ASSERT_EQ(res->status, i % 11 == 0 ? 400 : 200) << res->body;
    if (i == 99) after_100 = rss_bytes();
  }
  const size_t after_1000 = rss_bytes();
  std::printf("RSS after 100 requests %zu KiB, after 1000 %zu KiB\n", after_100 >> 10, after_1000 >> 10);
  EXPECT_LT(after_1000, after_100 + (4u << 20)) << "RSS " << after_100 << " after 100 requests, " << after_1000
                                                << " after 1,000";
  // The last answer is sent before the engine's step that ended it counts it.
  auto st = r.engine->stats();
  for (int i = 0; i < 200 && st.running != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    st = r.engine->stats();
  }
  EXPECT_EQ(st.running, 0u);
  EXPECT_LE(st.kept_prefixes, 32u);
}

// Many clients connecting at once are all served (the listen queue is not
// the library's 5), and a second server cannot take the same port.
TEST(HttpServer, ManyConnectionsAtOnceAndOneServerAPort) {
  Running r;
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int i = 0; i < 48; ++i)
    clients.emplace_back([&] {
      httplib::Client cli("127.0.0.1", r.port);
      cli.set_connection_timeout(30);
      cli.set_read_timeout(120);
      json body = json::parse(kChat);
      body["max_tokens"] = 2;
      auto res = cli.Post("/v1/chat/completions", body.dump(), "application/json");
      if (res && res->status == 200) ++ok;
    });
  for (auto& c : clients) c.join();
  EXPECT_EQ(ok.load(), 48);
  HttpOptions ho;
  ho.port = r.port;
  HttpServer second(*r.engine, r.model->tokenizer(), r.chat.get(), ho);
  EXPECT_THROW(second.bind(), Error);
}

TEST(HttpServer, ErrorsAndEndpoints) {
  Running r("sekret");
  httplib::Client cli("127.0.0.1", r.port);
  auto no_key = cli.Post("/v1/chat/completions", kChat, "application/json");
  ASSERT_TRUE(no_key);
  EXPECT_EQ(no_key->status, 401);
  EXPECT_EQ(json::parse(no_key->body)["error"]["type"], "authentication_error");
  const httplib::Headers auth = {{"Authorization", "Bearer sekret"}};
  auto bad_json = cli.Post("/v1/chat/completions", auth, "{not json", "application/json");
  ASSERT_TRUE(bad_json);
  EXPECT_EQ(bad_json->status, 400);
  auto bad_type = cli.Post("/v1/chat/completions", auth, R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})",
                           "application/json");
  ASSERT_TRUE(bad_type);
  EXPECT_EQ(bad_type->status, 400);
  EXPECT_EQ(json::parse(bad_type->body)["error"]["param"], "temperature");
  auto too_long = cli.Post("/v1/completions", auth, json{{"prompt", std::vector<int>(600, 1)}}.dump(), "application/json");
  ASSERT_TRUE(too_long);
  EXPECT_EQ(too_long->status, 400);
  EXPECT_NE(too_long->body.find("600"), std::string::npos) << too_long->body;
  EXPECT_NE(too_long->body.find("512"), std::string::npos) << too_long->body;
  auto models = cli.Get("/v1/models", auth);
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "tiny");
  auto health = cli.Get("/health");  // the one endpoint without the key
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  // Every other endpoint asks for it: a 401 in the OpenAI error shape
  // without it, with a wrong one, or with one that is the key's prefix.
  for (const httplib::Headers& h : {httplib::Headers{}, httplib::Headers{{"Authorization", "Bearer sekreT"}},
                                    httplib::Headers{{"Authorization", "Bearer sekre"}},
                                    httplib::Headers{{"Authorization", "Bearer sekret2"}}}) {
    for (const char* path : {"/", "/metrics", "/props", "/v1/models", "/no/such/thing"}) {
      auto got = cli.Get(path, h);
      ASSERT_TRUE(got) << path;
      EXPECT_EQ(got->status, 401) << path;
      EXPECT_EQ(json::parse(got->body)["error"]["type"], "authentication_error") << path;
    }
    for (const char* path : {"/tokenize", "/detokenize", "/v1/completions"}) {
      auto got = cli.Post(path, h, R"({"content": "hello"})", "application/json");
      ASSERT_TRUE(got) << path;
      EXPECT_EQ(got->status, 401) << path;
    }
  }
  auto page = cli.Get("/", auth);
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  auto tk = cli.Post("/tokenize", auth, R"({"content": "hello"})", "application/json");
  ASSERT_TRUE(tk);
  const json ids = json::parse(tk->body)["tokens"];
  auto dt = cli.Post("/detokenize", auth, json{{"tokens", ids}}.dump(), "application/json");
  ASSERT_TRUE(dt);
  EXPECT_NE(json::parse(dt->body)["content"].get<std::string>().find("hello"), std::string::npos);
  auto metrics = cli.Get("/metrics", auth);
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("weir_requests_total"), std::string::npos);
  EXPECT_NE(metrics->body.find("weir_kv_cells_used"), std::string::npos);
  EXPECT_NE(metrics->body.find("weir_spec_guesses_accepted_total"), std::string::npos);
}

// /tokenize as llama-server's: add_special puts the vocabulary's BOS first,
// with_pieces gives each id its text (the pieces make the content again),
// and any other field is a 400 naming it.
TEST(HttpServer, TokenizeTakesLlamaServersFields) {
  Running r;
  httplib::Client cli("127.0.0.1", r.port);
  const auto post = [&](const json& body) {
    auto got = cli.Post("/tokenize", body.dump(), "application/json");
    EXPECT_TRUE(got);
    return got ? std::make_pair(got->status, got->body) : std::make_pair(0, std::string());
  };
  const auto [st, plain] = post({{"content", "hello world"}});
  ASSERT_EQ(st, 200) << plain;
  const json ids = json::parse(plain)["tokens"];
  const auto [st2, special] = post({{"content", "hello world"}, {"add_special", true}});
  ASSERT_EQ(st2, 200) << special;
  const json with_bos = json::parse(special)["tokens"];
  const Vocab& v = r.model->tokenizer().vocab();
  if (v.add_bos) {
    ASSERT_EQ(with_bos.size(), ids.size() + 1);
    EXPECT_EQ(with_bos[0], v.bos);
  } else {
    EXPECT_EQ(with_bos, ids);
  }
  const auto [st3, pieces] = post({{"content", "hello world"}, {"with_pieces", true}});
  ASSERT_EQ(st3, 200) << pieces;
  std::string text;
  const json tp = json::parse(pieces)["tokens"];
  ASSERT_EQ(tp.size(), ids.size());
  for (size_t i = 0; i < tp.size(); ++i) {
    EXPECT_EQ(tp[i]["id"], ids[i]);
    text += tp[i]["piece"].get<std::string>();
  }
  EXPECT_NE(text.find("hello world"), std::string::npos) << text;
  const auto [st4, bad] = post({{"content", "x"}, {"with_piece", true}});
  EXPECT_EQ(st4, 400);
  EXPECT_EQ(json::parse(bad)["error"]["param"], "with_piece");
  const auto [st5, bad2] = post({{"content", "x"}, {"add_special", "yes"}});
  EXPECT_EQ(st5, 400);
  EXPECT_EQ(json::parse(bad2)["error"]["param"], "add_special");
}

// GET /props, as llama-server's: the context, the sampling defaults, the
// slots, the model's names and its chat template; read only.
TEST(HttpServer, PropsSayWhatTheServerRuns) {
  Running r;
  httplib::Client cli("127.0.0.1", r.port);
  auto got = cli.Get("/props");
  ASSERT_TRUE(got);
  ASSERT_EQ(got->status, 200) << got->body;
  const json p = json::parse(got->body);
  EXPECT_EQ(p["default_generation_settings"]["n_ctx"], 512);
  EXPECT_EQ(p["default_generation_settings"]["params"]["temperature"], 1.0);
  EXPECT_EQ(p["default_generation_settings"]["params"]["top_k"], 0);
  EXPECT_EQ(p["total_slots"], 3);
  EXPECT_EQ(p["model_alias"], "tiny");
  EXPECT_EQ(p["model_path"], "tiny.gguf");
  EXPECT_NE(p["chat_template"].get<std::string>().find("assistant:"), std::string::npos);
  auto post = cli.Post("/props", "{}", "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 404);  // read only
  EXPECT_TRUE(json::parse(post->body).contains("error"));
}

// /slots: one entry a slot (-np 3), idle here; read only.
TEST(HttpServer, SlotsListEverySlot) {
  Running r;
  httplib::Client cli("127.0.0.1", r.port);
  auto got = cli.Get("/slots");
  ASSERT_TRUE(got);
  ASSERT_EQ(got->status, 200) << got->body;
  const json s = json::parse(got->body);
  ASSERT_TRUE(s.is_array());
  ASSERT_EQ(s.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(s[size_t(i)]["id"], i);
    EXPECT_EQ(s[size_t(i)]["n_ctx"], 512);
    EXPECT_EQ(s[size_t(i)]["is_processing"], false);
  }
  auto post = cli.Post("/slots", "{}", "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 404);
  EXPECT_EQ(json::parse(post->body)["error"]["type"], "not_found_error");
}

// --open-chat-page: with a key, the page is served without it; the API is not.
TEST(HttpServer, OpenChatPageLeavesTheApiKeyed) {
  Running r("sekret", true);
  httplib::Client cli("127.0.0.1", r.port);
  auto page = cli.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  auto models = cli.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);
  auto metrics = cli.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 401);
}

// A stop that comes after bind() and before run() (a signal right after
// weir serve said it listens) is not lost: run() returns at once.
TEST(HttpServer, StopBeforeRunIsNotLost) {
  Running r;
  HttpOptions ho;
  ho.port = 0;
  HttpServer second(*r.engine, r.model->tokenizer(), r.chat.get(), ho);
  second.bind();
  second.stop();
  const auto t0 = std::chrono::steady_clock::now();
  std::thread t([&] { second.run(); });
  t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

}  // namespace
}  // namespace weir::server
