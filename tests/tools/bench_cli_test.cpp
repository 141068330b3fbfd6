// weir bench end to end on a tiny synthetic model: JSON a program can read,
// the markdown table with weir's lines after it, and llama-bench options
// weir cannot honour refused with a clear message.
#include <gtest/gtest.h>

#include <string>

#include "backend/registry.h"
#include "json_lite.h"
#include "tools/weir_cli.h"

namespace {

using weir::test::run_weir;

std::string tiny_model() {
  static const std::string path = [] {
    const std::string p = weir::test::process_dir() + "/bench-cli-tiny.gguf";
    const auto r = run_weir("synth --arch llama --preset tiny --type Q8_0 -o " + weir::test::shell_quote(p));
    EXPECT_EQ(r.code, 0) << r.err;
    return p;
  }();
  return path;
}

TEST(BenchCli, JsonOnATinyModel) {
  const std::string m = tiny_model();
  const auto r = run_weir("bench -m " + weir::test::shell_quote(m) + " -p 16 -n 4 -r 1 -o json -t 1");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto doc = weir::test::json::parse(r.out);
  ASSERT_EQ(doc.size(), 2u) << r.out;
  const auto& pp = doc[0];
  const auto& tg = doc[1];
  EXPECT_EQ(pp["model_filename"].as_string(), m);
  EXPECT_EQ(pp["model_type"].as_string().rfind("llama ", 0), 0u) << pp["model_type"].as_string();
  EXPECT_EQ(pp["n_prompt"].as_int(), 16);
  EXPECT_EQ(pp["n_gen"].as_int(), 0);
  EXPECT_EQ(tg["n_gen"].as_int(), 4);
  EXPECT_EQ(tg["n_threads"].as_int(), 1);
  EXPECT_EQ(tg["backends"].as_string(), "CPU");
  for (const auto* v : {&pp, &tg}) {
    EXPECT_EQ((*v)["samples_ns"].size(), 1u);
    EXPECT_GT((*v)["avg_ts"].as_number(), 0.0);
    EXPECT_GT((*v)["model_size"].as_int(), 0);
    EXPECT_GT((*v)["load_ms"].as_number(), 0.0);
  }
  EXPECT_TRUE(pp["bytes_per_token"].is_null());
  EXPECT_GT(tg["bytes_per_token"].as_int(), 0);
  EXPECT_GT(tg["mem_read_gbps"].as_number(), 0.0);
  EXPECT_NEAR(tg["achieved_gbps"].as_number(),
              double(tg["bytes_per_token"].as_int()) * tg["avg_ts"].as_number() / 1e9, 1e-3);
}

TEST(BenchCli, MarkdownTableThenWeirLines) {
  const std::string m = tiny_model();
  const auto r = run_weir("bench -m " + weir::test::shell_quote(m) + " -p 8 -n 2 -d 4 -r 1 -t 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("| model ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("|        pp8 @ d4 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("|        tg2 @ d4 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n  load: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("measured read bandwidth"), std::string::npos) << r.out;
}

TEST(BenchCli, Errors) {
  const std::string m = tiny_model();
  weir::test::CliResult r;
  if (weir::cuda_devices().empty()) {  // layers on a GPU that is not there: some or all of them
    for (const char* ngl : {"1", "99"}) {
      r = run_weir("bench -m " + weir::test::shell_quote(m) + " -ngl " + ngl + " -p 8 -n 0 -r 1");
      EXPECT_EQ(r.code, 2);
      EXPECT_NE(r.err.find("no GPU"), std::string::npos) << r.err;
    }
  }
  r = run_weir("bench -m /nonexistent/x.gguf -p 8 -n 0 -r 1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("/nonexistent/x.gguf"), std::string::npos) << r.err;
  r = run_weir("bench --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--numa"), std::string::npos);
}

}  // namespace
