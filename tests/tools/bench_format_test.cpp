// weir bench's printers on fixed results: the markdown table byte for byte
// in llama-bench's layout, CSV and JSON with its field names.
#include "tools/bench_format.h"

#include <gtest/gtest.h>

#include <string>

#include "json_lite.h"

namespace weir::tools {
namespace {

// Two results shaped like llama-bench's README example (qwen2 7B Q4_K - Medium).
struct Fixture {
  BenchModelInfo model;
  BenchRow pp, tg;
  Fixture() {
    model.path = "models/Qwen2.5-7B-Instruct-Q4_K_M.gguf";
    model.description = "qwen2 7B Q4_K - Medium";
    model.size_bytes = 4677120000;
    model.n_params = 7615616512;
    model.load_ms = 33.4;
    model.weight_bytes_per_token = 4000000000;
    pp.model = tg.model = &model;
    pp.result.test = BenchTest{model.path, 512, 0, 512, 2048, 512, 8};
    pp.result.test_time = "2025-04-24T11:57:09Z";
    pp.result.samples_ns = {512000000, 256000000};  // 1000 and 2000 t/s
    tg.result.test = BenchTest{model.path, 0, 128, 0, 2048, 512, 8};
    tg.result.test_time = "2025-04-24T11:57:10Z";
    tg.result.samples_ns = {2000000000, 2000000000};  // 64 t/s
    tg.bytes_per_token = 4001000000;
    tg.kv_bytes_per_token = 1000000;
    tg.mem_read_bps = 512.0e9;
  }
  BenchEnv env() const {
    BenchEnv e;
    e.cpu_info = "Test CPU";
    return e;
  }
};

TEST(BenchFormat, MarkdownTable) {
  Fixture f;
  auto p = make_bench_printer("md", f.env());
  ASSERT_TRUE(p);
  const std::string want =
      "| model                          |       size |     params | backend    | threads |            test |"
      "                  t/s |\n"
      "| ------------------------------ | ---------: | ---------: | ---------- | ------: | --------------: |"
      " -------------------: |\n"
      "| qwen2 7B Q4_K - Medium         |   4.36 GiB |     7.62 B | CPU        |       8 |    pp512 @ d512 |"
      "     1500.00 \xC2\xB1 707.11 |\n"
      "| qwen2 7B Q4_K - Medium         |   4.36 GiB |     7.62 B | CPU        |       8 |           tg128 |"
      "         64.00 \xC2\xB1 0.00 |\n";
  std::string got = p->header();
  got += p->row(f.pp);
  got += p->row(f.tg);
  EXPECT_EQ(got, want);
  const std::string foot = p->footer({f.pp, f.tg});
  EXPECT_NE(foot.find("load: 33 ms"), std::string::npos) << foot;
  EXPECT_NE(foot.find("4000.00 MB of weights"), std::string::npos) << foot;
  // 4001 MB/token x 64 t/s = 256.06 GB/s, half the measured 512 GB/s.
  EXPECT_NE(foot.find("tg128"), std::string::npos) << foot;
  EXPECT_NE(foot.find("4001.00 MB/token (KV 1.00 MB) x 64.00 t/s = 256.06 GB/s, 50% of 512.00 GB/s"),
            std::string::npos)
      << foot;
  EXPECT_EQ(foot.find("pp512"), std::string::npos) << "bandwidth lines are for tg tests only\n" << foot;
}

TEST(BenchFormat, MarkdownBatchColumnsWhenNotDefault) {
  Fixture f;
  BenchEnv e = f.env();
  e.show_n_batch = e.show_n_ubatch = true;
  auto p = make_bench_printer("md", e);
  EXPECT_NE(p->header().find("| threads | n_batch | n_ubatch |            test |"), std::string::npos)
      << p->header();
  EXPECT_NE(p->row(f.tg).find("|       8 |    2048 |      512 |           tg128 |"), std::string::npos)
      << p->row(f.tg);
}

TEST(BenchFormat, Csv) {
  Fixture f;
  f.model.path = "a \"quoted\" path.gguf";
  auto p = make_bench_printer("csv", f.env());
  EXPECT_EQ(p->header(),
            "cpu_info,gpu_info,backends,model_filename,model_type,model_size,model_n_params,n_batch,n_ubatch,"
            "n_threads,type_k,type_v,n_gpu_layers,n_prompt,n_gen,n_depth,test_time,avg_ns,stddev_ns,avg_ts,"
            "stddev_ts,numa,n_parallel,load_ms,bytes_per_token,achieved_gbps,mem_read_gbps\n");
  EXPECT_EQ(p->row(f.tg),
            "\"Test CPU\",\"\",\"CPU\",\"a \"\"quoted\"\" path.gguf\",\"qwen2 7B Q4_K - Medium\",\"4677120000\","
            "\"7615616512\",\"2048\",\"512\",\"8\",\"f16\",\"f16\",\"0\",\"0\",\"128\",\"0\","
            "\"2025-04-24T11:57:10Z\",\"2000000000\",\"0\",\"64.000000\",\"0.000000\",\"off\",\"1\",\"33.400\","
            "\"4001000000\",\"256.064\",\"512.000\"\n");
  // pp rows leave the bandwidth fields empty.
  EXPECT_NE(p->row(f.pp).find(",\"33.400\",\"\",\"\",\"\"\n"), std::string::npos) << p->row(f.pp);
}

TEST(BenchFormat, Json) {
  Fixture f;
  f.model.description = "odd \"name\" \\ here";
  auto p = make_bench_printer("json", f.env());
  // One call after another: the printer keeps state (the comma between rows).
  std::string text = p->header();
  text += p->row(f.pp);
  text += p->row(f.tg);
  text += p->footer({f.pp, f.tg});
  const auto doc = test::json::parse(text);
  ASSERT_TRUE(doc.is_array());
  ASSERT_EQ(doc.size(), 2u);
  const auto& pp = doc[0];
  const auto& tg = doc[1];
  EXPECT_EQ(pp["model_type"].as_string(), "odd \"name\" \\ here");
  EXPECT_EQ(pp["model_size"].as_int(), 4677120000);
  EXPECT_EQ(pp["n_prompt"].as_int(), 512);
  EXPECT_EQ(pp["n_depth"].as_int(), 512);
  EXPECT_EQ(pp["backends"].as_string(), "CPU");
  EXPECT_DOUBLE_EQ(pp["avg_ts"].as_number(), 1500.0);
  EXPECT_EQ(pp["samples_ns"].as_int_vector<int64_t>(), (std::vector<int64_t>{512000000, 256000000}));
  EXPECT_EQ(pp["samples_ts"].size(), 2u);
  EXPECT_TRUE(pp["bytes_per_token"].is_null());
  EXPECT_EQ(tg["n_gen"].as_int(), 128);
  EXPECT_EQ(tg["bytes_per_token"].as_int(), 4001000000);
  EXPECT_NEAR(tg["achieved_gbps"].as_number(), 256.064, 1e-9);
  EXPECT_NEAR(tg["mem_read_gbps"].as_number(), 512.0, 1e-9);
  EXPECT_NEAR(tg["load_ms"].as_number(), 33.4, 1e-9);
  // An empty run is still a JSON array.
  auto q = make_bench_printer("json", f.env());
  std::string empty = q->header();
  empty += q->footer({});
  EXPECT_EQ(test::json::parse(empty).size(), 0u);
  // jsonl: one object per line.
  auto l = make_bench_printer("jsonl", f.env());
  const std::string line = l->row(f.tg);
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  EXPECT_EQ(test::json::parse(line)["n_gen"].as_int(), 128);
  EXPECT_EQ(make_bench_printer("sql", f.env()), nullptr);
}

TEST(BenchFormat, SizesAsLlamaBench) {
  EXPECT_EQ(bench_size_text(246587904), "235.16 MiB");
  EXPECT_EQ(bench_size_text(uint64_t(3) << 30), "3.00 GiB");
  EXPECT_EQ(bench_params_text(268098176), "268.10 M");
  EXPECT_EQ(bench_params_text(6740000000), "6.74 B");
}

}  // namespace
}  // namespace weir::tools
