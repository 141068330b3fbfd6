// weir bench's command line: llama-bench's list syntax (commas, repeats,
// ranges), defaults replaced by the first value given, and clear errors.
#include "tools/bench_options.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tools/args.h"

namespace weir::tools {
namespace {

bool parse(std::vector<std::string> args, BenchOptions* o) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_bench_options(int(argv.size()), argv.data(), o);
}

TEST(BenchOptions, IntLists) {
  EXPECT_EQ(parse_int_list("-t", "1,2,4"), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(parse_int_list("-t", "1-4"), (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(parse_int_list("-t", "1-8*2"), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(parse_int_list("-p", "128-512+128"), (std::vector<int>{128, 256, 384, 512}));
  EXPECT_EQ(parse_int_list("-p", "0,64-65"), (std::vector<int>{0, 64, 65}));
  EXPECT_EQ(parse_int_list("-ngl", "-1"), (std::vector<int>{-1}));
  for (const char* bad : {"", "1,,2", "x", "4-1", "1-8*1", "0-8*2", "1-4+0", "1.5"})
    EXPECT_THROW(parse_int_list("-t", bad), UsageError) << bad;
  try {
    parse_int_list("-t", "1,x");
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("-t"), std::string::npos) << e.what();
  }
}

TEST(BenchOptions, DefaultsAndCrossProduct) {
  BenchOptions o;
  ASSERT_TRUE(parse({"-m", "a.gguf"}, &o));
  EXPECT_EQ(o.plan.n_prompt, std::vector<int>{512});
  EXPECT_EQ(o.plan.n_gen, std::vector<int>{128});
  EXPECT_EQ(o.plan.n_depth, std::vector<int>{0});
  EXPECT_EQ(o.reps, 5);
  EXPECT_EQ(o.output, "md");
  EXPECT_TRUE(o.default_batch() && o.default_ubatch());
  EXPECT_EQ(o.runtime.numa, "off");

  BenchOptions p;
  ASSERT_TRUE(parse({"-m", "a.gguf,b.gguf", "-m", "c.gguf", "-p", "16", "-p", "32", "-n", "4", "-d", "0,64",
                     "-t", "1,2", "-r", "3", "-o", "json", "-b", "256", "--numa", "distribute"},
                    &p));
  EXPECT_EQ(p.plan.models, (std::vector<std::string>{"a.gguf", "b.gguf", "c.gguf"}));
  EXPECT_EQ(p.plan.n_prompt, (std::vector<int>{16, 32}));  // repeats append, the default is gone
  EXPECT_EQ(p.plan.n_threads, (std::vector<int>{1, 2}));
  EXPECT_EQ(p.reps, 3);
  EXPECT_EQ(p.output, "json");
  EXPECT_FALSE(p.default_batch());
  EXPECT_TRUE(p.default_ubatch());
  EXPECT_EQ(p.runtime.numa, "distribute");
  // 3 models x 2 threads x 2 depths x (2 pp + 1 tg)
  EXPECT_EQ(expand_tests(p.plan).size(), 3u * 2 * 2 * 3);
}

TEST(BenchOptions, Errors) {
  const auto err = [](std::vector<std::string> args) -> std::string {
    BenchOptions o;
    try {
      parse(std::move(args), &o);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(err({"-p", "16"}).find("no model"), std::string::npos);
  EXPECT_EQ(err({"-m", "a", "-ngl", "99"}), "");  // checked against the model when it runs
  EXPECT_NE(err({"-m", "a", "-ngl", "-1"}).find("-ngl"), std::string::npos);
  EXPECT_EQ(err({"-m", "a", "-ngl", "0"}), "");
  EXPECT_NE(err({"-m", "a", "--numa", "numactl"}).find("--numa"), std::string::npos);
  EXPECT_NE(err({"-m", "a", "-o", "sql"}).find("-o"), std::string::npos);
  EXPECT_NE(err({"-m", "a", "-t", "0"}).find("-t"), std::string::npos);
  EXPECT_NE(err({"-m", "a", "-r", "0"}).find("-r"), std::string::npos);
  EXPECT_NE(err({"-m", "a", "-p", "0", "-n", "0"}).find("nothing to run"), std::string::npos);
  EXPECT_NE(err({"-m", "a", "-ctk", "q4_0"}).find("-ctk"), std::string::npos);
  EXPECT_NE(err({"-m", "a", "-ctk", "q8_0", "-ctv", "q4_0"}).find("-ctv"), std::string::npos);
  // As llama-bench: -ctv stays f16 unless given, and weir's one cache type
  // cannot hold K and V apart.
  EXPECT_NE(err({"-m", "a", "-ctk", "f32"}).find("differ"), std::string::npos);
  EXPECT_NE(err({"-m", "a", "-ctk", "q8_0"}).find("differ"), std::string::npos);
  BenchOptions o;
  ASSERT_TRUE(parse({"-m", "a", "-ctk", "f32", "-ctv", "f32"}, &o));
  EXPECT_EQ(o.kv_type, DType::F32);
  ASSERT_TRUE(parse({"-m", "a", "-ctk", "q8_0", "-ctv", "q8_0"}, &o));
  EXPECT_EQ(o.kv_type, DType::Q8_0);
  ASSERT_TRUE(parse({"-m", "a"}, &o));
  EXPECT_EQ(o.kv_type, DType::F16);
}

}  // namespace
}  // namespace weir::tools
