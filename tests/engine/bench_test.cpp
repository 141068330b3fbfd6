// The benchmark engine: test expansion in llama-bench's order, test names,
// statistics, and a short run on a tiny synthetic model.
#include "engine/bench.h"

#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "model/model.h"
#include "model/synth.h"
#include "model/synth_presets.h"
#include "test_env.h"

namespace weir {
namespace {

TEST(Bench, TestNames) {
  BenchTest t;
  t.n_prompt = 512;
  EXPECT_EQ(t.name(), "pp512");
  t.n_depth = 512;
  EXPECT_EQ(t.name(), "pp512 @ d512");
  t.n_prompt = 0, t.n_gen = 128, t.n_depth = 0;
  EXPECT_EQ(t.name(), "tg128");
  t.n_prompt = 16;
  EXPECT_EQ(t.name(), "pp16+tg128");
  t.n_prompt = 0, t.n_parallel = 64, t.n_depth = 32;
  EXPECT_EQ(t.name(), "tg128 x64 @ d32");
  EXPECT_EQ(t.n_ctx(), 64 * (32 + 128 + 1));
}

TEST(Bench, ParallelSequencesMakePpAndTgTests) {
  BenchPlan p;
  p.models = {"a.gguf"};
  p.n_prompt = {16};
  p.n_gen = {4};
  p.n_parallel = {1, 8};
  p.json_schemas = {{"", ""}, {"s.json", "{}"}};
  const std::vector<BenchTest> v = expand_tests(p);
  ASSERT_EQ(v.size(), 6u);
  EXPECT_EQ(v[0].name(), "pp16");
  EXPECT_EQ(v[1].name(), "pp16 x8");
  EXPECT_EQ(v[2].name(), "tg4");
  EXPECT_EQ(v[3].name(), "tg4 +json s.json");
  EXPECT_EQ(v[4].name(), "tg4 x8");
  EXPECT_EQ(v[5].name(), "tg4 x8 +json s.json");
  BenchResult r;
  r.test = v[4];
  r.samples_ns = {1000000000};
  EXPECT_DOUBLE_EQ(r.avg_ts(), 32.0);  // every sequence's tokens count
  r.test = v[1];
  EXPECT_DOUBLE_EQ(r.avg_ts(), 128.0);  // every prompt's
}

TEST(Bench, ExpandIsTheCrossProductInLlamaBenchOrder) {
  BenchPlan p;
  p.models = {"a.gguf", "b.gguf"};
  p.n_prompt = {16, 0, 32};  // 0 makes no test
  p.n_gen = {4};
  p.n_depth = {0, 64};
  p.n_threads = {1, 2};
  const std::vector<BenchTest> v = expand_tests(p);
  ASSERT_EQ(v.size(), 2u * 2 * 2 * 3);
  // model > threads > depth, then pp tests, then tg tests.
  EXPECT_EQ(v[0].model, "a.gguf");
  EXPECT_EQ(v[0].n_threads, 1);
  EXPECT_EQ(v[0].name(), "pp16");
  EXPECT_EQ(v[1].name(), "pp32");
  EXPECT_EQ(v[2].name(), "tg4");
  EXPECT_EQ(v[3].name(), "pp16 @ d64");
  EXPECT_EQ(v[6].n_threads, 2);
  EXPECT_EQ(v[12].model, "b.gguf");
  for (const BenchTest& t : v) {
    EXPECT_EQ(t.n_batch, 2048);
    EXPECT_EQ(t.n_ubatch, 512);
  }
}

TEST(Bench, Statistics) {
  EXPECT_DOUBLE_EQ(bench_mean({1, 2, 3, 4}), 2.5);
  EXPECT_NEAR(bench_stdev({1, 2, 3, 4}), std::sqrt(5.0 / 3.0), 1e-12);  // sample (n - 1)
  EXPECT_EQ(bench_stdev({5}), 0.0);
  BenchResult r;
  r.test.n_gen = 100;
  r.samples_ns = {1000000000, 2000000000};  // 100 t/s and 50 t/s
  EXPECT_DOUBLE_EQ(r.avg_ts(), 75.0);       // t/s per repetition, then the mean
  EXPECT_NEAR(r.stdev_ts(), std::sqrt(2 * 25.0 * 25.0), 1e-9);
  EXPECT_EQ(r.avg_ns(), 1500000000u);
}

TEST(Bench, RunsOnATinyModel) {
  const std::string path = test::own_dir() + "/bench-engine-llama.gguf";
  SynthOptions so;
  so.sync = false;
  write_synth_model(find_synth_preset("llama", "tiny"), so, path);
  auto model = Model::load(path);
  CpuBackend backend(1);
  BenchRunOptions o;
  o.reps = 2;
  for (BenchTest t : {BenchTest{path, 8, 0, 0, 4, 512, 1}, BenchTest{path, 0, 3, 5, 2048, 512, 1}}) {
    SCOPED_TRACE(t.name());
    const BenchResult r = run_bench_test(*model, backend, t, o);
    ASSERT_EQ(r.samples_ns.size(), 2u);
    EXPECT_GT(r.avg_ts(), 0.0);
    EXPECT_EQ(r.test_time.size(), 20u) << r.test_time;  // 2025-01-02T03:04:05Z
  }
  BenchTest par{path, 0, 3, 2, 2048, 512, 1};
  par.n_parallel = 3;
  const BenchResult pr = run_bench_test(*model, backend, par, o);
  EXPECT_EQ(pr.samples_ns.size(), 2u);
  // Prompts at once (steps of 5 tokens across 3 prompts of 7), and decode
  // under a JSON grammar.
  BenchTest prompts{path, 7, 0, 0, 5, 5, 1};
  prompts.n_parallel = 3;
  EXPECT_EQ(run_bench_test(*model, backend, prompts, o).samples_ns.size(), 2u);
  BenchTest json{path, 0, 6, 0, 2048, 512, 1};
  json.n_parallel = 2;
  json.json_schema = "object", json.schema_name = "object";
  EXPECT_EQ(run_bench_test(*model, backend, json, o).samples_ns.size(), 2u);
  BenchTest none{path, 0, 0, 0, 2048, 512, 1};
  EXPECT_THROW(run_bench_test(*model, backend, none, o), Error);
}

}  // namespace
}  // namespace weir
