// weir embed on the command line, on the real Gemma 3 (skipped when
// absent): JSON in OpenAI's /v1/embeddings shape, plain lines of the same
// vectors (unnormalized with --normalize none, the same direction),
// -p taking a text with commas whole, --pooling none's vector a token, and
// bad flags named. Then a BERT encoder (weir synth's tiny bert): its CLS
// pooling, inputs of many lengths, and weir run / chat refusing it.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_env.h"
#include "tools/weir_cli.h"

namespace weir::test {
namespace {

TEST(EmbedCli, JsonAndPlainGiveTheSameVectors) {
  WEIR_REQUIRE_MODEL(model);
  const std::string common = "embed -m " + model + " -t 2 -p 'Hello world' -p 'Paris, France'";
  const CliResult js = run_weir(common);
  ASSERT_EQ(js.code, 0) << js.err;
  const nlohmann::json j = nlohmann::json::parse(js.out);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 2u);  // "Paris, France" is one text: -p takes commas whole
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 4);
  EXPECT_NE(js.err.find("pooling mean (the model's)"), std::string::npos) << js.err;
  const CliResult plain = run_weir(common + " --format plain --normalize none");
  ASSERT_EQ(plain.code, 0) << plain.err;
  std::istringstream lines(plain.out);
  for (size_t i = 0; i < 2; ++i) {
    std::string line;
    ASSERT_TRUE(std::getline(lines, line));
    std::istringstream xs(line);
    std::vector<double> raw;
    for (double x; xs >> x;) raw.push_back(x);
    ASSERT_EQ(raw.size(), 640u);
    double n = 0;
    for (double x : raw) n += x * x;
    n = std::sqrt(n);
    EXPECT_GT(std::fabs(n - 1), 1e-3);  // not normalized
    for (size_t k = 0; k < raw.size(); ++k)
      ASSERT_NEAR(raw[k] / n, j["data"][i]["embedding"][k].get<double>(), 1e-5) << "text " << i << ", value " << k;
  }
  // Every token's vector with --pooling none; bad flags name themselves.
  const CliResult none = run_weir("embed -m " + model + " -t 2 -p 'Hello world' --pooling none");
  ASSERT_EQ(none.code, 0) << none.err;
  const nlohmann::json per_token = nlohmann::json::parse(none.out);
  EXPECT_EQ(per_token["data"][0]["embedding"].size(), size_t(per_token["usage"]["prompt_tokens"].get<int>()));
  EXPECT_EQ(per_token["data"][0]["embedding"][0].size(), 640u);
  const CliResult bad = run_weir("embed -m " + model + " -p x --pooling max");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--pooling"), std::string::npos) << bad.err;
  EXPECT_EQ(run_weir("embed -m " + model).code, 2);  // no text
}

// weir embed on a BERT encoder: pooling cls from its file, unit vectors of
// its 256 dims, each text's vector the same alone and beside others of
// other lengths (every text encoded whole in one step); weir run and weir
// chat refuse the model, naming why.
TEST(EmbedCli, BertEncoder) {
  const std::string model = own_dir() + "/embed-cli-bert.gguf";
  const CliResult synth = run_weir("synth --arch bert --preset tiny --type F16 -o " + model);
  ASSERT_EQ(synth.code, 0) << synth.err;
  const CliResult js = run_weir("embed -m " + model + " -t 2 -p 'hello world' -p 'the cat sat on the mat' -p a");
  ASSERT_EQ(js.code, 0) << js.err;
  EXPECT_NE(js.err.find("pooling cls (the model's)"), std::string::npos) << js.err;
  const nlohmann::json j = nlohmann::json::parse(js.out);
  ASSERT_EQ(j["data"].size(), 3u);
  for (const auto& d : j["data"]) {
    ASSERT_EQ(d["embedding"].size(), 256u);
    double n = 0;
    for (const auto& x : d["embedding"]) n += x.get<double>() * x.get<double>();
    EXPECT_NEAR(n, 1.0, 1e-5);
  }
  const CliResult alone = run_weir("embed -m " + model + " -t 2 -p 'the cat sat on the mat'");
  ASSERT_EQ(alone.code, 0) << alone.err;
  const nlohmann::json a = nlohmann::json::parse(alone.out);
  for (size_t k = 0; k < 256; ++k)
    ASSERT_NEAR(a["data"][0]["embedding"][k].get<double>(), j["data"][1]["embedding"][k].get<double>(), 1e-6) << k;
  for (const std::string cmd : {"run -m " + model + " -p hello -n 4", "chat -m " + model + " < /dev/null"}) {
    const CliResult r = run_weir(cmd);
    EXPECT_NE(r.code, 0) << cmd;
    EXPECT_NE(r.err.find("only makes embeddings"), std::string::npos) << cmd << ": " << r.err;
  }
}

}  // namespace
}  // namespace weir::test
