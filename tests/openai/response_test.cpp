// Response objects in OpenAI's shapes (the fields the openai package reads),
// tokens that are parts of characters sent as valid JSON with their bytes,
// and the server-sent events framing.
#include "engine/openai/response.h"

#include <gtest/gtest.h>

namespace weir::openai {
namespace {

using nlohmann::json;

TEST(OpenAiResponse, ChatCompletionShape) {
  const ResponseHead h{"chatcmpl-1", 1764000000, "gemma"};
  std::vector<TokenLogprob> lp = {{"Hi", -0.25f, {{"Hi", -0.25f}, {"Hello", -1.5f}}}, {"\xE2\x82", -0.5f, {}}};
  const json j = chat_completion(h, json::array({chat_choice(0, "Hi\xE2\x82\xAC", "stop", &lp)}), Usage{5, 2, 3});
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"], "chatcmpl-1");
  EXPECT_EQ(j["created"], 1764000000);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hi\xE2\x82\xAC");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["total_tokens"], 7);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
  const json& c = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0]["top_logprobs"][1]["token"], "Hello");
  EXPECT_EQ(c[1]["token"], "\xEF\xBF\xBD\xEF\xBF\xBD");  // two stray bytes, each replaced
  EXPECT_EQ(c[1]["bytes"], json::array({0xE2, 0x82}));
  EXPECT_NO_THROW(json::parse(j.dump()));
}

// Tool calls as OpenAI sends them: message.tool_calls with the arguments as
// JSON text, content null when only white space is left; streamed, a chunk
// opening each call (id, type, name, empty arguments), then its arguments.
TEST(OpenAiResponse, ToolCallsShape) {
  const ResponseHead h{"chatcmpl-2", 1764000000, "gemma"};
  const std::vector<ToolCall> calls = {{"call_a", "get_weather", "{\"city\":\"Paris\"}"}, {"call_b", "now", "{}"}};
  json j = chat_completion(h, json::array({chat_choice(0, "\n ", "tool_calls", nullptr, &calls)}), Usage{5, 2, 0});
  const json& m = j["choices"][0]["message"];
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(m["tool_calls"], json::parse(R"([
      {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
      {"id": "call_b", "type": "function", "function": {"name": "now", "arguments": "{}"}}])"));
  j = chat_completion(h, json::array({chat_choice(0, "Checking.", "tool_calls", nullptr, &calls)}), Usage{});
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Checking.");
  EXPECT_FALSE(chat_choice(0, "x", "stop", nullptr)["message"].contains("tool_calls"));

  const std::vector<json> chunks = tool_call_chunks(h, 2, 1, calls[0]);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(chunks[0]["choices"][0]["index"], 2);  // the choice's index; the call's is in the delta
  EXPECT_EQ(chunks[0]["choices"][0]["delta"], json::parse(R"({"tool_calls": [{"index": 1, "id": "call_a",
      "type": "function", "function": {"name": "get_weather", "arguments": ""}}]})"));
  EXPECT_EQ(chunks[1]["choices"][0]["delta"],
            json::parse(R"({"tool_calls": [{"index": 1, "function": {"arguments": "{\"city\":\"Paris\"}"}}]})"));
  EXPECT_TRUE(chunks[1]["choices"][0]["finish_reason"].is_null());
}

TEST(OpenAiResponse, StreamChunks) {
  const ResponseHead h{"chatcmpl-2", 1, "m"};
  const std::string role = "assistant";
  const json first = chat_chunk(h, 0, &role, "", "", nullptr);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  const json last = chat_chunk(h, 0, nullptr, "", "length", nullptr);
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  const json u = usage_chunk(h, true, Usage{3, 4, 0});
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["completion_tokens"], 4);
  EXPECT_EQ(sse_event(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  const json t = text_chunk(ResponseHead{"cmpl-3", 1, "m"}, 5, "abc", "", nullptr);
  EXPECT_EQ(t["object"], "text_completion");
  EXPECT_EQ(t["choices"][0]["text"], "abc");
  EXPECT_EQ(t["choices"][0]["index"], 5);
}

// A Harmony model's analysis: message.reasoning_content (as llama-server
// returns it), absent when empty; streamed as delta.reasoning_content.
TEST(OpenAiResponse, ReasoningContent) {
  const std::string reasoning = "User asks 2+2.";
  const json m = chat_choice(0, "4", "stop", nullptr, nullptr, &reasoning)["message"];
  EXPECT_EQ(m["reasoning_content"], "User asks 2+2.");
  EXPECT_EQ(m["content"], "4");
  const std::string none;
  EXPECT_FALSE(chat_choice(0, "4", "stop", nullptr, nullptr, &none)["message"].contains("reasoning_content"));
  const json c = reasoning_chunk(ResponseHead{"chatcmpl-4", 1, "m"}, 1, "think", nullptr);
  EXPECT_EQ(c["object"], "chat.completion.chunk");
  EXPECT_EQ(c["choices"][0]["index"], 1);
  EXPECT_EQ(c["choices"][0]["delta"], json::parse(R"({"reasoning_content": "think"})"));
  EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
}

// Several choices (n, best_of, prompt lists): each at its index, the usage
// of all of them once.
TEST(OpenAiResponse, SeveralChoices) {
  const ResponseHead h{"cmpl-4", 1, "m"};
  const json j = text_completion(h, json::array({text_choice(0, "a", "stop", nullptr), text_choice(1, "b", "length", nullptr)}),
                                 Usage{4, 7, 3});
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["choices"][1]["text"], "b");
  EXPECT_EQ(j["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(j["usage"], json::parse(R"({"prompt_tokens": 4, "completion_tokens": 7, "total_tokens": 11,
                                       "prompt_tokens_details": {"cached_tokens": 3}})"));
  const json c = chat_chunk(h, 3, nullptr, "x", "", nullptr);
  EXPECT_EQ(c["choices"][0]["index"], 3);
  EXPECT_EQ(c["choices"][0]["delta"]["content"], "x");
}

}  // namespace
}  // namespace weir::openai
