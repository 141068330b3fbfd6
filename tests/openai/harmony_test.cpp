// gpt-oss's Harmony answers, hand-written as the model writes them after
// the template's "<|start|>assistant" (the vocabulary renders every marker
// but the <|return|> or <|call|> that ends generation), read into content,
// reasoning and tool calls; streamed in pieces of any size they add up to
// the same.
#include "engine/openai/harmony.h"

#include <gtest/gtest.h>

namespace weir::openai {
namespace {

using nlohmann::json;

HarmonyAnswer streamed(std::string_view text, size_t piece, bool tools) {
  HarmonyStream s(tools);
  HarmonyAnswer out;
  for (size_t i = 0; i < text.size(); i += piece) {
    const HarmonyAnswer a = s.push(text.substr(i, piece));
    EXPECT_TRUE(a.calls.empty()) << "calls come at the end";
    out.content += a.content;
    out.reasoning += a.reasoning;
  }
  HarmonyAnswer end = s.finish();
  out.content += end.content;
  out.reasoning += end.reasoning;
  out.calls = std::move(end.calls);
  return out;
}

// The whole text and every way of streaming it give `content`, `reasoning`
// and these calls (name, arguments).
void expect_reads(std::string_view text, bool tools, const std::string& content, const std::string& reasoning,
                  const std::vector<std::pair<std::string, std::string>>& calls = {}) {
  std::vector<HarmonyAnswer> got = {parse_harmony(text, tools)};
  for (size_t piece : {1, 2, 3, 5, 8, 13}) got.push_back(streamed(text, piece, tools));
  for (size_t k = 0; k < got.size(); ++k) {
    SCOPED_TRACE(std::string(text) + (k ? " streamed, case " + std::to_string(k) : " whole"));
    EXPECT_EQ(got[k].content, content);
    EXPECT_EQ(got[k].reasoning, reasoning);
    ASSERT_EQ(got[k].calls.size(), calls.size());
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(got[k].calls[i].name, calls[i].first);
      EXPECT_EQ(got[k].calls[i].arguments, calls[i].second);
      EXPECT_EQ(got[k].calls[i].id.substr(0, 5), "call_");
    }
  }
}

TEST(Harmony, AnalysisThenFinal) {
  expect_reads("<|channel|>analysis<|message|>User greets. Reply briefly.<|end|>"
               "<|start|>assistant<|channel|>final<|message|>Hello! How can I help?",
               false, "Hello! How can I help?", "User greets. Reply briefly.");
}

TEST(Harmony, FinalOnly) {
  expect_reads("<|channel|>final<|message|>Just the answer.", false, "Just the answer.", "");
  // A <|return|> that reached the text (ignore_eos) ends the message too.
  expect_reads("<|channel|>final<|message|>Done.<|return|>", false, "Done.", "");
}

TEST(Harmony, MarkersInsideTheTextStayWhereTheyAreNotMarkers) {
  expect_reads("<|channel|>analysis<|message|>Compare a<|b and x|>y.<|end|><|start|>assistant<|channel|>final<|message|>"
               "It is <| not a marker |> here.",
               false, "It is <| not a marker |> here.", "Compare a<|b and x|>y.");
}

TEST(Harmony, ToolCallWithConstrainAfterTheChannel) {
  expect_reads("<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
               "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\", \"days\": 2}",
               true, "", "Need weather.", {{"get_weather", "{\"city\": \"Paris\", \"days\": 2}"}});
}

TEST(Harmony, ToolCallWithTheRecipientInTheRoleHeader) {
  // Right after the prompt's "<|start|>assistant": the recipient first.
  expect_reads(" to=functions.search<|channel|>commentary json<|message|>{\"query\": \"weir\"}", true, "", "",
               {{"search", "{\"query\": \"weir\"}"}});
  expect_reads("<|channel|>analysis<|message|>Look it up.<|end|><|start|>assistant to=functions.search"
               "<|channel|>commentary <|constrain|>json<|message|> {\"query\": \"a b\"} ",
               true, "", "Look it up.", {{"search", "{\"query\": \"a b\"}"}});
}

TEST(Harmony, PreambleOnCommentaryIsContent) {
  expect_reads("<|channel|>commentary<|message|>Checking two cities.<|end|>"
               "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Rome\"}",
               true, "Checking two cities.", "", {{"get_weather", "{\"city\":\"Rome\"}"}});
}

TEST(Harmony, CallWithoutToolsOrBrokenStaysInTheContentAsWritten) {
  const std::string call = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Oslo\"}";
  expect_reads(call, false, call, "");
  const std::string broken = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": ";
  expect_reads(broken, true, broken, "");
  // Built-in tools (browser, python) are no OpenAI functions.
  const std::string python = "<|channel|>analysis to=python code<|message|>print(1)";
  expect_reads(python, true, python, "");
}

TEST(Harmony, PlainTextWithoutHeaders) {
  expect_reads("Hello there.", false, "Hello there.", "");
  expect_reads("{\"name\": \"x\"}", true, "{\"name\": \"x\"}", "");
  expect_reads("", false, "", "");
  // Markers of other formats, or near misses, are no Harmony header.
  expect_reads("<|message>\n\n#", false, "<|message>\n\n#", "");
  expect_reads("<|im_start|>hi<|end|>", false, "<|im_start|>hi", "");
  expect_reads("<b>bold</b>", false, "<b>bold</b>", "");
}

TEST(Harmony, AnswerCutInsideAHeaderOrBody) {
  // max_tokens ended it: an unfinished header gives nothing, a body what it has.
  expect_reads("<|channel|>analysis<|message|>Thinking<|end|><|start|>assistant<|chan", false, "", "Thinking");
  expect_reads("<|channel|>analysis<|message|>Thinking about it", false, "", "Thinking about it");
  expect_reads("<|channel|>analysis<|message|>Thinking<|en", false, "", "Thinking<|en");
}

TEST(Harmony, MessagesWithoutEndMarkers) {
  // A model that opens the next message without closing the last.
  expect_reads("<|channel|>analysis<|message|>t<|start|>assistant<|channel|>final<|message|>f", false, "f", "t");
}

TEST(Harmony, StreamsReasoningAndContentAsTheyCome) {
  HarmonyStream s(true);
  HarmonyAnswer a = s.push("<|channel|>analysis<|message|>Let me");
  EXPECT_EQ(a.reasoning, "Let me");
  a = s.push(" think.<|e");
  EXPECT_EQ(a.reasoning, " think.");  // "<|e" may begin <|end|>: held
  a = s.push("nd|><|start|>assistant<|channel|>final<|message|>Hi");
  EXPECT_EQ(a.reasoning, "");
  EXPECT_EQ(a.content, "Hi");
  a = s.push("<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\":");
  EXPECT_EQ(a.content, "");  // a call is held to the end
  a = s.push("1}");
  EXPECT_EQ(a.content, "");
  const HarmonyAnswer end = s.finish();
  EXPECT_EQ(end.content, "");
  ASSERT_EQ(end.calls.size(), 1u);
  EXPECT_EQ(end.calls[0].name, "f");
  EXPECT_EQ(end.calls[0].arguments, "{\"a\":1}");
}

TEST(Harmony, TemplateDetection) {
  EXPECT_TRUE(is_harmony_template("{{- \"<|start|>assistant<|channel|>final<|message|>\" }}"));
  EXPECT_FALSE(is_harmony_template("{{ '<|im_start|>' + m.role }}"));
}

TEST(Harmony, MessagesForTheTemplate) {
  const json in = json::parse(R"([
    {"role": "user", "content": "q"},
    {"role": "assistant", "content": null, "reasoning_content": "think", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]},
    {"role": "tool", "content": null},
    {"role": "assistant", "content": "a", "reasoning_content": "r", "thinking": "kept"},
    {"role": "assistant", "content": null},
    {"role": "assistant", "content": "Checking.", "reasoning_content": "r", "tool_calls": []},
    {"role": "assistant", "content": "", "reasoning_content": "r", "tool_calls": []}
  ])");
  const json out = harmony_messages(in);
  EXPECT_FALSE(out[1].contains("content"));
  EXPECT_EQ(out[1]["thinking"], "think");
  EXPECT_TRUE(out[2]["content"].is_null());  // only assistant turns change
  EXPECT_EQ(out[3]["thinking"], "kept");
  EXPECT_TRUE(out[4]["content"].is_null());  // no tool calls: the template decides
  EXPECT_EQ(out[0], in[0]);
  EXPECT_FALSE(out[5].contains("thinking"));  // the template refuses content and thinking beside calls
  EXPECT_EQ(out[6]["thinking"], "r");
}

}  // namespace
}  // namespace weir::openai
