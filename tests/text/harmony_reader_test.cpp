// text/harmony.h: gpt-oss's Harmony answers (hand-written as the model
// writes them after the template's "<|start|>assistant") split into
// reasoning, content and messages to a recipient, whatever the pieces the
// text comes in. The OpenAI layer's reading of them (tool calls) is
// tests/openai/harmony_test.cpp.
#include "text/harmony.h"

#include <gtest/gtest.h>

namespace weir {
namespace {

HarmonyText read_in_pieces(std::string_view text, size_t piece) {
  HarmonyReader r;
  HarmonyText out;
  auto add = [&](HarmonyText t) {
    out.reasoning += t.reasoning;
    out.content += t.content;
    for (HarmonyCall& c : t.calls) out.calls.push_back(std::move(c));
  };
  for (size_t i = 0; i < text.size(); i += piece) add(r.push(text.substr(i, piece)));
  add(r.finish());
  return out;
}

TEST(HarmonyReader, SplitsChannelsAndRecipients) {
  const std::string text =
      "<|channel|>analysis<|message|>First thought.<|end|>"
      "<|start|>assistant<|channel|>analysis<|message|>Second thought.<|end|>"
      "<|start|>assistant<|channel|>commentary<|message|>Let me check.<|end|>"
      "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}";
  for (size_t piece : {1, 2, 4, 9, 1000}) {
    SCOPED_TRACE(piece);
    const HarmonyText t = read_in_pieces(text, piece);
    EXPECT_EQ(t.reasoning, "First thought.\nSecond thought.");  // messages on lines of their own
    EXPECT_EQ(t.content, "Let me check.");
    ASSERT_EQ(t.calls.size(), 1u);
    EXPECT_EQ(t.calls[0].recipient, "functions.get_weather");
    EXPECT_EQ(t.calls[0].body, "{\"city\": \"Paris\"}");
    EXPECT_EQ(t.calls[0].text,
              "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}");
  }
}

TEST(HarmonyReader, CallsComeWhenTheirMessageEnds) {
  HarmonyReader r;
  EXPECT_TRUE(r.push(" to=python<|channel|>analysis code<|message|>print(2)").calls.empty());
  const HarmonyText t = r.push("<|call|>");
  ASSERT_EQ(t.calls.size(), 1u);
  EXPECT_EQ(t.calls[0].recipient, "python");
  EXPECT_EQ(t.calls[0].body, "print(2)");
  EXPECT_TRUE(r.finish().calls.empty());
}

TEST(HarmonyReader, DetectsTheTemplate) {
  EXPECT_TRUE(is_harmony_template("{{- \"<|start|>assistant<|channel|>final<|message|>\" }}"));
  EXPECT_FALSE(is_harmony_template("{{ '<|im_start|>' + m.role }}"));
}

}  // namespace
}  // namespace weir
