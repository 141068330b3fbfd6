// Request bodies read defensively: nesting past the limit, strings that are
// not UTF-8 and malformed JSON are 400s naming the field (or the limit),
// never a crash, and every error message is UTF-8 (it goes into a JSON
// response). The UTF-8 verdicts are checked against Python's rule through
// fixed cases (overlongs, surrogates, values over U+10FFFF).
#include "engine/openai/json_body.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "engine/openai/request.h"

namespace weir::openai {
namespace {

using nlohmann::json;

// The ApiError a body gets (status 0: none).
ApiError refusal(const std::string& body, int depth = 64) {
  try {
    JsonLimits l;
    l.max_depth = depth;
    parse_json_body(body, l);
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError(0, "", "", "");
}

TEST(JsonBody, DeepNestingIsRefusedNamingTheLimit) {
  const std::string deep = "{\"messages\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  const ApiError e = refusal(deep);
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(std::string(e.what()).find("64 levels"), std::string::npos) << e.what();
  EXPECT_EQ(e.param.rfind("messages[0]", 0), 0u) << e.param;
  // Unclosed too: the scan stops at the limit, before the parser.
  EXPECT_EQ(refusal(std::string(1000000, '[')).status, 400);
  // At the limit, parsed.
  const std::string at = std::string(64, '[') + std::string(64, ']');
  EXPECT_EQ(refusal(at).status, 0);
  EXPECT_EQ(refusal(std::string(65, '[') + std::string(65, ']')).status, 400);
  // Brackets inside strings do not count.
  EXPECT_EQ(refusal("[\"" + std::string(1000, '[') + "\"]").status, 0);
}

TEST(JsonBody, InvalidUtf8IsRefusedNamingTheField) {
  const std::string body = std::string(R"({"model": "m", "messages": [{"role": "user", "content": "ok"},)") +
                           R"({"role": "user", "content": "bad )" + "\xff" + R"("}]})";
  const ApiError e = refusal(body);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "messages[1].content");
  EXPECT_NO_THROW(error_json(e).dump());  // strict: throws on invalid UTF-8
  EXPECT_EQ(refusal("{\"stop\": [\"a\", \"\xc3\"]}").param, "stop[1]");
  const ApiError key = refusal("{\"a\xe2\x82\": 1}");
  EXPECT_EQ(key.status, 400);
  EXPECT_NE(std::string(key.what()).find("a key"), std::string::npos) << key.what();
  EXPECT_NO_THROW(error_json(key).dump());
}

TEST(JsonBody, Utf8VerdictsFollowTheStandard) {
  // Python: bytes.decode("utf-8") accepts exactly these.
  const char* good[] = {"plain", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xef\xbf\xbf", "\xf4\x8f\xbf\xbf"};
  const char* bad[] = {"\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80", "\x80", "\xe2\x82"};
  for (const char* g : good) EXPECT_EQ(refusal(std::string("[\"") + g + "\"]").status, 0) << g;
  for (const char* b : bad) EXPECT_EQ(refusal(std::string("[\"") + b + "\"]").status, 400) << b;
}

TEST(JsonBody, UnpairedSurrogateEscapesAreRefused) {
  EXPECT_EQ(refusal(R"({"prompt": "\ud83d\ude00"})").status, 0);
  EXPECT_EQ(refusal(R"({"prompt": "\ud800"})").param, "prompt");
  EXPECT_EQ(refusal(R"({"prompt": "\udc00x"})").param, "prompt");
  EXPECT_EQ(refusal(R"({"prompt": "\ud800\u0041"})").param, "prompt");
}

TEST(JsonBody, HugeNumbersNeitherCrashNorWrap) {
  for (const char* n : {"1e999", "-1e999", "18446744073709551616", "1e-999", "123456789012345678901234567890"}) {
    SCOPED_TRACE(n);
    const std::string body = std::string("{\"seed\": ") + n + "}";
    const ApiError e = refusal(body);
    if (e.status == 0) {
      const json j = parse_json_body(body);
      EXPECT_FALSE(j["seed"].is_number_integer()) << "taken as an integer: " << j.dump();
    } else {
      EXPECT_EQ(e.status, 400);
    }
  }
}

TEST(JsonBody, SyntaxErrorsQuoteNoRawBytes) {
  for (const std::string& body : {std::string("{\xff}"), std::string("[1, \xfe\xfe"), std::string("{\"a\": tru\x80}")}) {
    const ApiError e = refusal(body);
    EXPECT_EQ(e.status, 400);
    EXPECT_NO_THROW(error_json(e).dump()) << "the message is not UTF-8";
    EXPECT_EQ(std::string(e.what()).find("json.exception"), std::string::npos) << e.what();
  }
}

// Random bytes around JSON's structural characters: parsed or refused with
// a 400, and the refusal always makes a valid JSON response.
TEST(JsonBody, RandomBodiesAreParsedOrRefusedCleanly) {
  std::mt19937 rng(7);
  const std::string alphabet = "[]{}\",:\\u0123456789abcdefnrtl .e-+\xff\xc3\xa9\xed\xa0";
  for (int i = 0; i < 20000; ++i) {
    std::string body;
    const int n = int(rng() % 40);
    for (int k = 0; k < n; ++k) body += alphabet[rng() % alphabet.size()];
    try {
      parse_json_body(body, JsonLimits{4});
    } catch (const ApiError& e) {
      ASSERT_EQ(e.status, 400);
      ASSERT_NO_THROW(error_json(e).dump()) << body;
    }
  }
}

}  // namespace
}  // namespace weir::openai
