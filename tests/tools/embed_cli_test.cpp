// weir embed on the command line, on the real Gemma 3 (skipped when
// absent): JSON in OpenAI's /v1/embeddings shape, plain lines of the same
// vectors (unnormalized with --normalize none, the same direction),
// -p taking a text with commas whole, --pooling none's vector a token, and
// bad flags named.
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

}  // namespace
}  // namespace weir::test
