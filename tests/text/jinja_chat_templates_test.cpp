// Real chat templates, rendered over many conversations and compared byte
// for byte with Python's jinja2: the DeepSeek-R1 (Qwen2) template stored in
// the reference GGUF, Gemma 3's, and ChatML (Qwen style, with tools), Llama 3,
// Mistral and Hermes (tool use) style templates from tests/data; and the
// tool-calling templates as the models publish them (tokenizer_config.json):
// Qwen 2.5, Qwen 3 (chatml-tools), Llama 3.1, Llama 3.2, Mistral 7B v0.3,
// Hermes 2 Pro (hermes-tools), Phi-3 mini, Gemma 2, and weir's built-in Gemma one with tools. A
// conversation a template refuses (roles that do not alternate) must fail in
// both.
#include <gtest/gtest.h>

#include <iostream>

#include "core/gguf.h"
#include "jinja_reference.h"

namespace weir {
namespace {

using test::JinjaCase;

struct Conversation {
  const char* name;
  const char* messages;  // JSON array
};

// What the templates are fed: plain turns, the edges of content, reasoning,
// tool calls and results, multimodal chunks, and broken role orders.
const Conversation kConversations[] = {
    {"user_only", R"([{"role": "user", "content": "Hello"}])"},
    {"system_user", R"([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}])"},
    {"two_turns", R"([{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"},
                      {"role": "user", "content": "And 3+3?"}])"},
    {"system_three_turns", R"([{"role": "system", "content": "Be kind.\nAlways."},
                               {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                               {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"},
                               {"role": "user", "content": "e"}])"},
    {"six_turns", R"([{"role": "user", "content": "1"}, {"role": "assistant", "content": "2"},
                      {"role": "user", "content": "3"}, {"role": "assistant", "content": "4"},
                      {"role": "user", "content": "5"}, {"role": "assistant", "content": "6"}])"},
    {"empty_content", R"([{"role": "user", "content": ""}, {"role": "assistant", "content": ""},
                          {"role": "user", "content": " "}])"},
    {"unicode", R"([{"role": "system", "content": "Réponds en français 🇫🇷"},
                    {"role": "user", "content": "你好，世界！😀 ｜full-width｜ ▁ مرحبا e\u0301"},
                    {"role": "assistant", "content": "こんにちは\u3000🌍"}, {"role": "user", "content": "Ω≈ç√∫"}])"},
    {"whitespace", R"([{"role": "user", "content": "  leading and trailing  \n"},
                       {"role": "assistant", "content": "\n\nline1\n\nline2\t\n"},
                       {"role": "user", "content": "\tx\r\ny "}])"},
    {"special_chars", R"([{"role": "user", "content": "quotes ' \" <tag> & \\ backslash {{ not a tag }} {% neither %}"},
                          {"role": "assistant", "content": "<b>bold</b> & 'it'"}])"},
    {"think", R"([{"role": "user", "content": "Why?"},
                  {"role": "assistant", "content": "<think>\nLet me reason.\n</think>\n\nBecause."},
                  {"role": "user", "content": "More?"}])"},
    {"think_last", R"([{"role": "user", "content": "Why?"},
                       {"role": "assistant", "content": "<think>\nreasoning\n</think>\n\nAnswer </think> twice"}])"},
    {"tool_calls_string_args", R"([{"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "id": "call_123456789abc",
          "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_123456789abc", "content": "{\"temp\": 21}"},
        {"role": "assistant", "content": "It is 21 degrees."}])"},
    {"two_tool_calls", R"([{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Paris and Rome?"},
        {"role": "assistant", "content": null, "tool_calls": [
          {"type": "function", "id": "aaaaaaaaa1", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
          {"type": "function", "id": "bbbbbbbbb2", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
        {"role": "tool", "tool_call_id": "aaaaaaaaa1", "content": "21"},
        {"role": "tool", "tool_call_id": "bbbbbbbbb2", "content": "25"},
        {"role": "assistant", "content": "Paris 21, Rome 25."}, {"role": "user", "content": "Thanks"}])"},
    {"tool_calls_object_args", R"([{"role": "user", "content": "Find 'x'"},
        {"role": "assistant", "content": "Searching.", "tool_calls": [{"type": "function", "id": "c0000000001",
          "function": {"name": "search", "arguments": {"query": "x", "limit": 3, "exact": true, "tags": ["a", "é"]}}}]},
        {"role": "tool", "tool_call_id": "c0000000001", "content": "no results"}])"},
    {"reasoning_field", R"([{"role": "user", "content": "q"},
        {"role": "assistant", "content": "a", "reasoning_content": "\nthought\n"}, {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "a2", "reasoning_content": "t2"}])"},
    {"chunks", R"([{"role": "system", "content": [{"type": "text", "text": "System in chunks"}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " Describe this. "}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]}])"},
    {"mistral_ids", R"([{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Paris and Rome?"},
        {"role": "assistant", "content": null, "tool_calls": [
          {"type": "function", "id": "a1b2c3d4e", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
          {"type": "function", "id": "f5g6h7i8j", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
        {"role": "tool", "tool_call_id": "a1b2c3d4e", "content": "21"},
        {"role": "tool", "tool_call_id": "f5g6h7i8j", "content": "25"}])"},
    {"one_call_then_answer", R"([{"role": "user", "content": "Weather in Zürich?"},
        {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "id": "zzzzzzzz9",
          "function": {"name": "get_weather", "arguments": "{\"city\": \"Z\u00fcrich\", \"unit\": \"celsius\"}"}}]},
        {"role": "tool", "tool_call_id": "zzzzzzzz9", "content": "{\"temp\": -3, \"sky\": \"snow {heavy}\"}"},
        {"role": "assistant", "content": "It is -3 and snowing."}, {"role": "user", "content": "And tomorrow?"}])"},
    {"call_pending", R"([{"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "id": "q1w2e3r4t",
          "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "tool_call_id": "q1w2e3r4t", "content": "cold"}])"},
    {"system_only", R"([{"role": "system", "content": "Only a system prompt"}])"},
    {"broken_two_users", R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])"},
    {"broken_assistant_first", R"([{"role": "assistant", "content": "I start"}, {"role": "user", "content": "no"}])"},
    {"unknown_role", R"([{"role": "user", "content": "a"}, {"role": "critic", "content": "b"}])"},
};

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city — now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city, e.g. 'Zürich' <b>"},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "search", "description": "Search & find",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "default": 10},
      "tags": {"type": "array", "items": {"type": "string"}}}}, "return": {"type": "string"}}}
])";

// gpt-oss (the Harmony format): its own conversations, since they carry what
// the generic ones lack: 'developer' first, 'thinking' (the analysis channel)
// with and without tool calls, a final answer after calls (which drops the
// call's analysis), content_type, argument strings (tojson quotes them), the
// template's refusals, and its kwargs (reasoning_effort, model_identity,
// builtin_tools). kGptOssTools covers every branch of its
// render_typescript_type: enums and defaults of each JSON type, arrays of
// each item type, of objects and of arrays, an array without 'items',
// nested objects, nullable, type lists, oneOf (the loop's 'set' does not
// leave the loop in Jinja, so objects among the variants do not turn it
// into 'any'), and tools without parameters.
const char* kGptOssTools = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city — now.",
    "parameters": {"type": "object", "properties": {
      "city": {"type": "string", "description": "The city, e.g. 'Zürich' <b>"},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
      "days": {"type": "integer", "description": "How many days", "default": 3},
      "detailed": {"type": "boolean", "default": false}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "search", "description": "Search & find",
    "parameters": {"type": "object", "properties": {
      "query": {"type": "string"}, "limit": {"type": "number", "default": 0.5},
      "tags": {"type": "array", "items": {"type": "string"}},
      "ids": {"type": "array", "items": {"type": "integer"}, "nullable": true},
      "flags": {"type": "array", "items": {"type": "boolean"}},
      "scores": {"type": "array", "items": {"type": "number"}},
      "points": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x"]}},
      "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
      "anything": {"type": "array"},
      "filter": {"type": "object", "description": "Nested", "properties": {"lang": {"type": "string", "enum": ["en", "fr"]},
         "range": {"type": "object", "properties": {"from": {"type": "integer"}, "to": {"type": "integer"}}, "required": ["from", "to"]}},
         "required": ["lang"], "default": {"lang": "en"}},
      "note": {"type": "string", "nullable": true, "default": null},
      "mode": {"type": ["string", "null"]},
      "one": {"type": ["integer"]},
      "choice": {"oneOf": [{"type": "string", "description": "a name"}, {"type": "integer", "default": 7}], "default": "auto"},
      "shape": {"oneOf": [{"type": "object"}, {"type": "string"}]},
      "meta": {"type": "object"},
      "free": {}
    }, "required": ["query"]}}},
  {"type": "function", "function": {"name": "now", "description": "The time", "parameters": {"type": "object", "properties": {}}}},
  {"type": "function", "function": {"name": "ping", "description": "Ping"}}
])";

const Conversation kGptOssConversations[] = {
    {"developer", R"([{"role": "developer", "content": "Answer in French."}, {"role": "user", "content": "Hi"}])"},
    {"system_then_developer", R"([{"role": "system", "content": "S"}, {"role": "developer", "content": "D"},
                                  {"role": "user", "content": "Hi"}])"},
    {"thinking", R"([{"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "thinking": "Two and two make four."}, {"role": "user", "content": "3+3?"}])"},
    {"thinking_last", R"([{"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "thinking": "Two\nand two."}])"},
    {"call_with_thinking", R"([{"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "thinking": "I need the weather tool.", "tool_calls": [{"type": "function", "id": "c1",
          "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21, \"sky\": \"clear\"}"}])"},
    {"call_with_content_as_analysis", R"([{"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [{"type": "function", "id": "c1",
          "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}])"},
    {"call_then_final", R"([{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Weather in Zürich?"},
        {"role": "assistant", "thinking": "Call it.", "tool_calls": [{"type": "function", "id": "c1",
          "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": {"temp": -3, "sky": "snow \"heavy\""}},
        {"role": "assistant", "content": "It is -3 and snowing.", "thinking": "Cold."}, {"role": "user", "content": "Thanks"}])"},
    {"two_calls", R"([{"role": "user", "content": "Search then time"},
        {"role": "assistant", "tool_calls": [{"type": "function", "id": "a", "function": {"name": "search",
          "arguments": {"query": "weir", "tags": ["a", "b"], "filter": {"lang": "en"}}}}]},
        {"role": "tool", "tool_call_id": "a", "content": "[1, 2]"},
        {"role": "assistant", "tool_calls": [{"type": "function", "id": "b", "function": {"name": "now", "arguments": {}}}]},
        {"role": "tool", "tool_call_id": "b", "content": "noon"}])"},
    {"content_type", R"j([{"role": "user", "content": "Run it"},
        {"role": "assistant", "tool_calls": [{"type": "function", "id": "p",
          "function": {"name": "python", "arguments": "print(1)", "content_type": "code"}}]},
        {"role": "tool", "content": "1\n"}])j"},
    {"bare_tool_call", R"([{"role": "user", "content": "Ping"},
        {"role": "assistant", "tool_calls": [{"name": "ping", "arguments": {"n": 1.5, "deep": [null, true]}}]},
        {"role": "tool", "content": "pong"}, {"role": "assistant", "content": "Pong."}])"},
    {"refused_content_and_thinking", R"([{"role": "user", "content": "x"},
        {"role": "assistant", "content": "c", "thinking": "t", "tool_calls": [{"function": {"name": "now", "arguments": {}}}]}])"},
    {"refused_channel_in_content", R"([{"role": "user", "content": "x"},
        {"role": "assistant", "content": "<|channel|>final<|message|>hi"}])"},
    {"refused_channel_in_thinking", R"([{"role": "user", "content": "x"},
        {"role": "assistant", "content": "hi", "thinking": "<|channel|>analysis<|message|>t"}])"},
    {"refused_tool_without_call", R"([{"role": "user", "content": "x"}, {"role": "tool", "content": "y"}])"},
    {"refused_tool_after_final", R"([{"role": "user", "content": "x"},
        {"role": "assistant", "tool_calls": [{"function": {"name": "now", "arguments": {}}}]},
        {"role": "tool", "content": "noon"}, {"role": "assistant", "content": "Noon."}, {"role": "tool", "content": "late"}])"},
};

// The kwargs Hugging Face's apply_chat_template passes through to the template.
const char* const kGptOssKwargs[] = {
    "",
    R"(, "reasoning_effort": "low")",
    R"(, "reasoning_effort": "high", "model_identity": "You are weir's test model.")",
    R"(, "builtin_tools": ["browser", "python"])",
    R"(, "builtin_tools": ["python"], "reasoning_effort": "medium")",
};

std::vector<JinjaCase> gpt_oss_cases(const std::string& source) {
  std::vector<JinjaCase> out;
  for (const Conversation& c : kGptOssConversations) {
    for (size_t k = 0; k < std::size(kGptOssKwargs); ++k) {
      for (int tools = 0; tools <= 1; ++tools) {
        for (int gen = 0; gen <= 1; ++gen) {
          JinjaCase j;
          j.name = std::string("gpt-oss/") + c.name + "/kwargs" + std::to_string(k) + (tools ? "/tools" : "") +
                   (gen ? "/generation_prompt" : "");
          j.source = source;
          j.context = std::string("{\"messages\": ") + c.messages + ", \"add_generation_prompt\": " +
                      (gen ? "true" : "false") + kGptOssKwargs[k] +
                      (tools ? std::string(", \"tools\": ") + kGptOssTools : "") + "}";
          out.push_back(std::move(j));
        }
      }
    }
  }
  return out;
}

struct ChatTemplate {
  std::string name;
  std::string source;
  std::string bos, eos;
  bool with_tools;  // also render every conversation with kTools
};

std::string read_data(const std::string& file) { return test::json::read_file(test::data_dir() + "/" + file); }

const std::vector<ChatTemplate>& templates() {
  static const std::vector<ChatTemplate> all = [] {
    const GGUFFile f = GGUFFile::open(test::ref_dir() + "/qwen2-vocab-deepseek-r1.gguf");
    return std::vector<ChatTemplate>{
        {"deepseek_r1", std::string(f.get_str("tokenizer.chat_template")), "<｜begin▁of▁sentence｜>",
         "<｜end▁of▁sentence｜>", false},
        {"gemma3", read_data("gemma3-chat-template.jinja"), "<bos>", "<eos>", false},
        {"chatml", read_data("chatml-tools-chat-template.jinja"), "", "<|im_end|>", true},
        {"llama3", read_data("llama3-chat-template.jinja"), "<|begin_of_text|>", "<|eot_id|>", true},
        {"mistral", read_data("mistral-chat-template.jinja"), "<s>", "</s>", true},
        {"hermes", read_data("hermes-tools-chat-template.jinja"), "<s>", "<|im_end|>", true},
        {"qwen2.5", read_data("qwen2.5-chat-template.jinja"), "", "<|im_end|>", true},
        {"llama3.1", read_data("llama3.1-chat-template.jinja"), "<|begin_of_text|>", "<|eot_id|>", true},
        {"llama3.2", read_data("llama3.2-chat-template.jinja"), "<|begin_of_text|>", "<|eot_id|>", true},
        {"mistral0.3", read_data("mistral-v0.3-chat-template.jinja"), "<s>", "</s>", true},
        {"gemma3_builtin", read_data("gemma3-builtin-chat-template.jinja"), "<bos>", "<eos>", true},
        // microsoft/Phi-3-mini-4k-instruct's tokenizer_config.json (EOS <|endoftext|>).
        {"phi3", read_data("phi3-chat-template.jinja"), "<s>", "<|endoftext|>", false},
        // openai/gpt-oss-120b's (and -20b's) chat_template.jinja as published on
        // Hugging Face: the copy llama.cpp keeps as models/templates/openai-gpt-oss-120b.jinja
        // before it changed param_spec['items'] for minja (16738 bytes, sha256 a4c9919c...7c8146).
        {"gpt-oss", read_data("gpt-oss-chat-template.jinja"), "", "<|return|>", true},
        // google/gemma-2-9b-it's tokenizer_config.json: no system role, 'assistant' as 'model'.
        {"gemma2", read_data("gemma2-chat-template.jinja"), "<bos>", "<eos>", false},
    };
  }();
  return all;
}

const std::string& source_of(const std::string& name) {
  for (const ChatTemplate& t : templates())
    if (t.name == name) return t.source;
  throw std::runtime_error("no chat template " + name);
}

std::vector<JinjaCase> cases_of(const ChatTemplate& t) {
  std::vector<JinjaCase> out;
  for (const Conversation& c : kConversations) {
    for (int tools = 0; tools <= (t.with_tools ? 1 : 0); ++tools) {
      for (int gen = 0; gen <= 1; ++gen) {
        JinjaCase k;
        k.name = t.name + "/" + c.name + (tools ? "/tools" : "") + (gen ? "/generation_prompt" : "");
        k.source = t.source;
        k.context = std::string("{\"messages\": ") + c.messages + ", \"add_generation_prompt\": " +
                    (gen ? "true" : "false") + ", \"bos_token\": " + test::json_quote(t.bos) +
                    ", \"eos_token\": " + test::json_quote(t.eos) + (tools ? std::string(", \"tools\": ") + kTools : "") +
                    "}";
        out.push_back(std::move(k));
      }
    }
  }
  return out;
}

class JinjaChatTemplates : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::vector<JinjaCase> all;
    for (const ChatTemplate& t : templates())
      for (JinjaCase& c : cases_of(t)) all.push_back(std::move(c));
    // Llama 3's template with the tools in the system turn, and Qwen3's
    // switch that closes an empty <think>.
    all.push_back({"llama3/tools_in_system", source_of("llama3"),
                   std::string(R"({"messages": [{"role": "user", "content": "hi"}], "tools_in_user_message": false,
                                   "date_string": "01 Jan 2025", "add_generation_prompt": true, "tools": )") + kTools + "}"});
    // Llama 3.1's built-in tools: the call as <|python_tag|>name.call(...).
    all.push_back({"llama3.1/builtin_tools", source_of("llama3.1"),
                   R"({"messages": [{"role": "user", "content": "Search for weir"},
                       {"role": "assistant", "tool_calls": [{"type": "function", "id": "b1",
                         "function": {"name": "brave_search", "arguments": {"query": "weir"}}}]},
                       {"role": "tool", "content": {"results": ["a", "b"]}}],
                       "builtin_tools": ["brave_search", "code_interpreter"], "add_generation_prompt": true})"});
    all.push_back({"llama3.1/tools_in_system", source_of("llama3.1"),
                   std::string(R"({"messages": [{"role": "system", "content": " S "}, {"role": "user", "content": "hi"}],
                                   "tools_in_user_message": false, "add_generation_prompt": true, "tools": )") + kTools + "}"});
    all.push_back({"chatml/no_thinking", source_of("chatml"),
                   R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true, "enable_thinking": false})"});
    for (JinjaCase& c : gpt_oss_cases(source_of("gpt-oss"))) all.push_back(std::move(c));
    results_ = new std::map<std::string, test::JinjaResult>(test::render_with_jinja2(all));
    extra_ = all;
  }
  static void TearDownTestSuite() {
    delete results_;
    results_ = nullptr;
  }

  // min_rendered: the share of conversations that must render (the rest
  // refused by both).
  static void check(const std::string& name, double min_rendered = 0.5) {
    ASSERT_FALSE(results_->empty()) << "no results from jinja2";
    size_t agree = 0, n = 0, rendered = 0;
    for (const JinjaCase& c : extra_) {
      if (c.name.rfind(name + "/", 0) != 0) continue;
      const test::JinjaResult& want = results_->at(c.name);
      ++n;
      rendered += want.ok;
      if (test::expect_same_as_jinja2(c, want)) ++agree;
    }
    std::cout << "[ jinja2   ] " << name << ": " << agree << "/" << n << " conversations agree (" << rendered
              << " rendered, " << n - rendered << " refused by both)\n";
    EXPECT_GT(double(rendered), min_rendered * double(n)) << "too few conversations rendered";
  }

  static std::map<std::string, test::JinjaResult>* results_;
  static std::vector<JinjaCase> extra_;
};

std::map<std::string, test::JinjaResult>* JinjaChatTemplates::results_ = nullptr;
std::vector<JinjaCase> JinjaChatTemplates::extra_;

TEST_F(JinjaChatTemplates, DeepSeekR1FromGGUF) { check("deepseek_r1"); }
TEST_F(JinjaChatTemplates, Gemma3) { check("gemma3"); }
TEST_F(JinjaChatTemplates, ChatMLWithTools) { check("chatml"); }
TEST_F(JinjaChatTemplates, Llama3) { check("llama3"); }
TEST_F(JinjaChatTemplates, Mistral) { check("mistral"); }
TEST_F(JinjaChatTemplates, HermesTools) { check("hermes"); }
TEST_F(JinjaChatTemplates, Qwen25Tools) { check("qwen2.5"); }
TEST_F(JinjaChatTemplates, Llama31Tools) { check("llama3.1"); }
TEST_F(JinjaChatTemplates, Llama32Tools) { check("llama3.2"); }
TEST_F(JinjaChatTemplates, Mistral03Tools) { check("mistral0.3"); }
TEST_F(JinjaChatTemplates, Gemma3BuiltInTools) { check("gemma3_builtin"); }
TEST_F(JinjaChatTemplates, Phi3) { check("phi3"); }
TEST_F(JinjaChatTemplates, GptOss) { check("gpt-oss"); }
// Gemma 2's template refuses any system turn, and more than half the
// conversations have one (or roles out of turn): a third must render.
TEST_F(JinjaChatTemplates, Gemma2) { check("gemma2", 1.0 / 3.0); }

// Gemma 2's: bos, turns trimmed, 'assistant' as 'model'.
TEST(JinjaChatTemplateChecks, Gemma2Layout) {
  const jinja::Template t(source_of("gemma2"));
  const std::string got = t.render(jinja::value_from_json(
      R"({"bos_token": "<bos>", "add_generation_prompt": true, "messages": [{"role": "user", "content": " Hi "},
          {"role": "assistant", "content": "Yo"}, {"role": "user", "content": "Q"}]})"));
  EXPECT_EQ(got,
            "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nYo<end_of_turn>\n"
            "<start_of_turn>user\nQ<end_of_turn>\n<start_of_turn>model\n");
}

// The Gemma 3 template as Google describes it: bos, the system prompt
// folded into the first user turn, 'assistant' as 'model'.
TEST(JinjaChatTemplateChecks, Gemma3Layout) {
  const jinja::Template t(source_of("gemma3"));
  const std::string got = t.render(jinja::value_from_json(
      R"({"bos_token": "<bos>", "add_generation_prompt": true, "messages": [{"role": "system", "content": "S"},
          {"role": "user", "content": " Hi "}, {"role": "assistant", "content": "Yo"}, {"role": "user", "content": "Q"}]})"));
  EXPECT_EQ(got,
            "<bos><start_of_turn>user\nS\n\nHi<end_of_turn>\n<start_of_turn>model\nYo<end_of_turn>\n"
            "<start_of_turn>user\nQ<end_of_turn>\n<start_of_turn>model\n");
}

// raise_exception's message reaches the caller with the line it came from.
TEST(JinjaChatTemplateChecks, RefusalNamesMessageAndLine) {
  jinja::Options o;
  o.name = "gemma3 chat template";
  const jinja::Template t(source_of("gemma3"), o);
  try {
    t.render(jinja::value_from_json(R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]})"));
    FAIL() << "rendered a conversation whose roles do not alternate";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("Conversation roles must alternate"), std::string::npos) << m;
    EXPECT_NE(m.find("gemma3 chat template: line 15:"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace weir
