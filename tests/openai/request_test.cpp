// Request bodies as the openai package and curl users send them: the fields
// land where they should (request_fields_test.cpp: every field honoured or
// refused, unknown ones refused), and every wrong type
// or range is a 400 naming the field.
#include "engine/openai/request.h"

#include <gtest/gtest.h>

#include <string>

namespace weir::openai {
namespace {

using nlohmann::json;

TEST(OpenAiRequest, ChatFields) {
  const json body = json::parse(R"({
    "model": "gemma", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    "max_completion_tokens": 12, "temperature": 0, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 7,
    "stop": ["\n\n", "END"], "presence_penalty": 0.5, "frequency_penalty": -0.5, "logprobs": true,
    "top_logprobs": 3, "stream": true, "stream_options": {"include_usage": true}, "user": "x", "metadata": {"a": 1},
    "ignore_eos": true})");
  const GenerationRequest r = parse_chat_request(body);
  EXPECT_TRUE(r.chat);
  EXPECT_EQ(r.model, "gemma");
  EXPECT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.max_tokens, 12);
  EXPECT_EQ(r.temperature, 0.0f);
  EXPECT_FLOAT_EQ(r.top_p, 0.9f);
  EXPECT_EQ(r.top_k, 40);
  EXPECT_FLOAT_EQ(r.min_p, 0.05f);
  ASSERT_TRUE(r.seed.has_value());
  EXPECT_EQ(*r.seed, 7u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_FLOAT_EQ(r.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.frequency_penalty, -0.5f);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.ignore_eos);
}

TEST(OpenAiRequest, Defaults) {
  const GenerationRequest c = parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "Hi"}]})"));
  EXPECT_EQ(c.max_tokens, -1);
  EXPECT_EQ(c.temperature, 1.0f);
  EXPECT_FALSE(c.stream);
  EXPECT_FALSE(c.ignore_eos);
  EXPECT_FALSE(c.seed.has_value());
  const GenerationRequest t = parse_completion_request(json::parse(R"({"prompt": "Once", "stop": "\n", "temperature": null})"));
  EXPECT_FALSE(t.chat);
  ASSERT_EQ(t.prompts.size(), 1u);
  EXPECT_EQ(t.prompts[0].text, "Once");
  EXPECT_TRUE(t.prompts[0].tokens.empty());
  EXPECT_EQ(t.n, 1);
  EXPECT_EQ(t.best_of, 1);
  EXPECT_FALSE(t.echo);
  EXPECT_EQ(t.suffix, "");
  EXPECT_EQ(t.max_tokens, 16);
  EXPECT_EQ(t.temperature, 1.0f);
  EXPECT_EQ(t.stop, std::vector<std::string>{"\n"});
  const GenerationRequest ids = parse_completion_request(json::parse(R"({"prompt": [1, 2, 3], "logprobs": 2})"));
  ASSERT_EQ(ids.prompts.size(), 1u);
  EXPECT_EQ(ids.prompts[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(ids.logprobs);
  EXPECT_EQ(ids.top_logprobs, 2);
}

struct Bad {
  bool chat;
  const char* body;
  const char* param;  // the field the error must name
};

TEST(OpenAiRequest, ErrorsNameTheField) {
  const Bad cases[] = {
      {true, R"([])", ""},
      {true, R"({})", "messages"},
      {true, R"({"messages": "hi"})", "messages"},
      {true, R"({"messages": []})", "messages"},
      {true, R"({"messages": [1]})", "messages[0]"},
      {true, R"({"messages": [{"content": "x"}]})", "messages[0].role"},
      {true, R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role"},
      {true, R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})", "temperature"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "temperature": 3})", "temperature"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "top_p": -0.1})", "top_p"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", "max_tokens"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1.5})", "max_tokens"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "n": 0})", "n"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "n": 129})", "n"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "n": 1.5})", "n"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "best_of": 2})", "best_of"},  // not a chat field
      {true, R"({"messages": [{"role": "user", "content": "x"}], "echo": true})", "echo"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "suffix": "y"})", "suffix"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "stop": 3})", "stop"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "stop": ["a","b","c","d","e"]})", "stop"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "stream": "yes"})", "stream"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": true}})", "stream_options"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 21, "logprobs": true})", "top_logprobs"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "seed": "s"})", "seed"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "presence_penalty": 2.5})", "presence_penalty"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "model": 4})", "model"},
      {false, R"({})", "prompt"},
      {false, R"({"prompt": 4})", "prompt"},
      {false, R"({"prompt": []})", "prompt"},
      {false, R"({"prompt": ["a", 1]})", "prompt"},
      {false, R"({"prompt": ["a", ["b"]]})", "prompt"},
      {false, R"({"prompt": [[1, 2], []]})", "prompt"},
      {false, R"({"prompt": [[1, 2], "a"]})", "prompt"},
      {false, R"({"prompt": [[1, 2.5]]})", "prompt"},
      {false, R"({"prompt": [[-1]]})", "prompt"},
      {false, R"({"prompt": [1, [2]]})", "prompt"},
      {false, R"({"prompt": ["a", "b", "c"], "n": 50})", "prompt"},  // 150 choices, over 128
      {false, R"({"prompt": "x", "best_of": 1, "n": 2})", "best_of"},
      {false, R"({"prompt": "x", "best_of": 0})", "best_of"},
      {false, R"({"prompt": "x", "best_of": 129})", "best_of"},
      {false, R"({"prompt": "x", "best_of": 2, "stream": true})", "best_of"},
      {false, R"({"prompt": "x", "suffix": 3})", "suffix"},
      {false, R"({"prompt": "x", "echo": "yes"})", "echo"},
      {false, R"({"prompt": "x", "echo": true, "logprobs": 1})", "echo"},
      {false, R"({"prompt": "x", "echo": true, "logprobs": 0})", "echo"},
      {false, R"({"prompt": "x", "logprobs": 30})", "logprobs"},
  };
  for (const Bad& b : cases) {
    const json body = json::parse(b.body);
    try {
      if (b.chat) parse_chat_request(body);
      else parse_completion_request(body);
      ADD_FAILURE() << b.body << ": accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << b.body;
      EXPECT_EQ(e.param, b.param) << b.body << ": " << e.what();
      const json j = error_json(e);
      EXPECT_EQ(j["error"]["type"], "invalid_request_error");
      EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
      if (*b.param) EXPECT_EQ(j["error"]["param"], b.param);
      else EXPECT_TRUE(j["error"]["param"].is_null());
    }
  }
}


// Token ids as sent: a number that does not fit int32 (or is not a token id
// at all) is refused naming the field and quoting the number, never
// wrapped to another id (2^32 + 9259 was taken as 9259, 2^63 as 0).
TEST(OpenAiRequest, TokenIdsOutsideInt32AreRefusedNotWrapped) {
  for (const char* id : {"4294976555", "9223372036854775808", "1000000000000", "-1", "18446744073709551615", "2147483648"}) {
    SCOPED_TRACE(id);
    const json body = json::parse(std::string(R"({"prompt": [1, )") + id + "]}");
    try {
      parse_completion_request(body);
      FAIL() << "accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.param, "prompt");
      EXPECT_NE(std::string(e.what()).find(id), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(parse_completion_request(json::parse(R"({"prompt": [0, 2147483647]})")).prompts.at(0).tokens,
            (std::vector<int32_t>{0, 2147483647}));
  EXPECT_THROW(parse_completion_request(json::parse(R"({"prompt": [[1], [4294976555]]})")), ApiError);
  EXPECT_EQ(token_id(json(262143), 262144, "tokens"), 262143);
  EXPECT_THROW(token_id(json(262144), 262144, "tokens"), ApiError);
  EXPECT_THROW(token_id(json(1.0), 262144, "tokens"), ApiError);
}

// n, best_of, echo, suffix and prompt lists as OpenAI's API takes them.
TEST(OpenAiRequest, ChoicesEchoSuffixAndPromptLists) {
  const GenerationRequest chat = parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "Hi"}], "n": 4})"));
  EXPECT_EQ(chat.n, 4);
  EXPECT_EQ(chat.best_of, 4);  // as many candidates as choices
  GenerationRequest r = parse_completion_request(json::parse(R"({"prompt": "x", "n": 128})"));
  EXPECT_EQ(r.n, 128);
  r = parse_completion_request(json::parse(R"({"prompt": "x", "n": 2, "best_of": 5})"));
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.best_of, 5);
  r = parse_completion_request(json::parse(R"({"prompt": "x", "best_of": 3})"));
  EXPECT_EQ(r.n, 1);
  EXPECT_EQ(r.best_of, 3);
  r = parse_completion_request(json::parse(R"({"prompt": "x", "stream": true, "best_of": 1})"));
  EXPECT_EQ(r.best_of, 1);  // best_of 1 streams
  r = parse_completion_request(json::parse(R"({"prompt": "x", "n": 3, "stream": true})"));
  EXPECT_EQ(r.n, 3);  // n streams, each choice at its index
  r = parse_completion_request(json::parse(R"({"prompt": "def f(", "suffix": "\n    return x\n", "echo": true})"));
  EXPECT_EQ(r.suffix, "\n    return x\n");
  EXPECT_TRUE(r.echo);
  r = parse_completion_request(json::parse(R"({"prompt": "x", "suffix": null, "echo": false, "best_of": null})"));
  EXPECT_EQ(r.suffix, "");
  EXPECT_FALSE(r.echo);
  EXPECT_EQ(r.best_of, 1);

  r = parse_completion_request(json::parse(R"({"prompt": ["a", "", "b c"], "n": 2})"));
  ASSERT_EQ(r.prompts.size(), 3u);
  EXPECT_EQ(r.prompts[0].text, "a");
  EXPECT_EQ(r.prompts[1].text, "");
  EXPECT_EQ(r.prompts[2].text, "b c");
  EXPECT_EQ(r.n, 2);
  r = parse_completion_request(json::parse(R"({"prompt": [[5, 6], [7]]})"));
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[0].tokens, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(r.prompts[1].tokens, (std::vector<int32_t>{7}));
  r = parse_completion_request(json::parse(R"({"prompt": ["one"]})"));
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "one");
  r = parse_completion_request(json::parse(R"({"prompt": ["a", "b"], "n": 64})"));  // 128 choices: the most
  EXPECT_EQ(r.prompts.size(), 2u);
}

TEST(OpenAiRequest, HugeIntegersAreOutOfRangeAsSent) {
  try {
    parse_completion_request(json::parse(R"({"prompt": "x", "max_tokens": 18446744073709551615})"));
    FAIL() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "max_tokens");
    EXPECT_NE(std::string(e.what()).find("18446744073709551615"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace weir::openai
