// Every field of OpenAI's chat and completions request bodies (and the
// extras weir takes), each with a value that asks for something: weir
// either does it (the request carries it) or answers 400 naming the field.
// Fields weir does not implement are taken at their default value. An
// unknown field is a 400 naming it, or with accept_unknown listed. The list
// is written here by hand from OpenAI's API reference, not read from
// request_fields.cpp.
#include <gtest/gtest.h>

#include <string>

#include "engine/openai/embeddings.h"
#include "engine/openai/request.h"
#include "engine/openai/request_fields.h"

namespace weir::openai {
namespace {

using nlohmann::json;

enum class Expect { Honoured, Refused };

struct FieldCase {
  const char* name;
  const char* value;    // JSON: a value that asks for something
  Expect expect;
  const char* at_default = nullptr;  // Refused fields weir takes at this value (JSON)
};

const json kMessages = json::parse(R"([{"role": "user", "content": "Hi"}])");

const FieldCase kChat[] = {
    {"model", R"("m")", Expect::Honoured},
    {"temperature", "0.5", Expect::Honoured},
    {"top_p", "0.5", Expect::Honoured},
    {"top_k", "5", Expect::Honoured},
    {"min_p", "0.1", Expect::Honoured},
    {"ignore_eos", "true", Expect::Honoured},
    {"presence_penalty", "1", Expect::Honoured},
    {"frequency_penalty", "1", Expect::Honoured},
    {"seed", "3", Expect::Honoured},
    {"stream", "true", Expect::Honoured},
    {"stop", R"(["x"])", Expect::Honoured},
    {"max_tokens", "5", Expect::Honoured},
    {"max_completion_tokens", "5", Expect::Honoured},
    {"logprobs", "true", Expect::Honoured},
    {"user", R"("u")", Expect::Honoured},
    {"metadata", R"({"k": "v"})", Expect::Honoured},
    {"safety_identifier", R"("s")", Expect::Honoured},
    {"prompt_cache_key", R"("p")", Expect::Honoured},
    {"n", "2", Expect::Honoured},
    {"logit_bias", R"({"5": -100})", Expect::Honoured},
    {"response_format", R"({"type": "json_object"})", Expect::Honoured},
    {"grammar", R"("root ::= \"yes\" | \"no\"")", Expect::Honoured},
    {"json_schema", R"({"type": "integer"})", Expect::Honoured},
    {"tools", R"([{"type": "function", "function": {"name": "f"}}])", Expect::Honoured},
    {"tool_choice", R"("required")", Expect::Refused, R"("none")"},  // required without tools (with: honoured below)
    {"functions", R"([{"name": "f"}])", Expect::Refused, "[]"},
    {"function_call", R"({"name": "f"})", Expect::Refused, R"("auto")"},
    {"parallel_tool_calls", R"("yes")", Expect::Refused, "true"},
    {"store", "true", Expect::Refused, "false"},
    {"service_tier", R"("flex")", Expect::Refused, R"("auto")"},
    {"modalities", R"(["text", "audio"])", Expect::Refused, R"(["text"])"},
    {"audio", R"({"voice": "alloy", "format": "wav"})", Expect::Refused},
    {"prediction", R"({"type": "content", "content": "x"})", Expect::Refused},
    {"reasoning_effort", R"("low")", Expect::Honoured},
    {"reasoning_effort", R"("minimal")", Expect::Refused},
    {"verbosity", R"("low")", Expect::Refused},
    {"web_search_options", "{}", Expect::Refused},
};

const FieldCase kCompletions[] = {
    {"model", R"("m")", Expect::Honoured},
    {"temperature", "0.5", Expect::Honoured},
    {"top_p", "0.5", Expect::Honoured},
    {"top_k", "5", Expect::Honoured},
    {"min_p", "0.1", Expect::Honoured},
    {"ignore_eos", "true", Expect::Honoured},
    {"presence_penalty", "1", Expect::Honoured},
    {"frequency_penalty", "1", Expect::Honoured},
    {"seed", "3", Expect::Honoured},
    {"stream", "true", Expect::Honoured},
    {"stop", R"("x")", Expect::Honoured},
    {"max_tokens", "5", Expect::Honoured},
    {"logprobs", "2", Expect::Honoured},
    {"user", R"("u")", Expect::Honoured},
    {"n", "2", Expect::Honoured},
    {"echo", "true", Expect::Honoured},
    {"best_of", "2", Expect::Honoured},
    {"suffix", R"("end")", Expect::Honoured},  // (a model without fill-in-the-middle tokens refuses it when it runs)
    {"logit_bias", R"({"5": -100})", Expect::Honoured},
    {"grammar", R"("root ::= \"yes\" | \"no\"")", Expect::Honoured},
    {"json_schema", R"({"type": "integer"})", Expect::Honoured},
};

GenerationRequest parse(bool chat, const json& body, bool accept_unknown = false) {
  return chat ? parse_chat_request(body, accept_unknown) : parse_completion_request(body, accept_unknown);
}

json base(bool chat) { return chat ? json{{"messages", kMessages}} : json{{"prompt", "Once"}}; }

void check_cases(bool chat, const FieldCase* cases, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const FieldCase& c = cases[i];
    json body = base(chat);
    body[c.name] = json::parse(c.value);
    SCOPED_TRACE(std::string(chat ? "chat " : "completions ") + c.name + " = " + c.value);
    if (c.expect == Expect::Honoured) {
      EXPECT_NO_THROW(parse(chat, body));
    } else {
      try {
        parse(chat, body);
        ADD_FAILURE() << "taken";
      } catch (const ApiError& e) {
        EXPECT_EQ(e.status, 400);
        EXPECT_EQ(e.param, c.name) << e.what();
        EXPECT_NE(std::string(e.what()).find(c.name), std::string::npos) << e.what();
      }
      if (c.at_default) {
        body[c.name] = json::parse(c.at_default);
        EXPECT_NO_THROW(parse(chat, body)) << "at " << c.at_default;
      }
    }
    body[c.name] = nullptr;  // null: the default, for every field
    EXPECT_NO_THROW(parse(chat, body)) << "null";
  }
}

TEST(OpenAiRequestFields, EveryChatFieldIsHonouredOrRefused) { check_cases(true, kChat, std::size(kChat)); }

TEST(OpenAiRequestFields, EveryCompletionsFieldIsHonouredOrRefused) {
  check_cases(false, kCompletions, std::size(kCompletions));
}

// What the honoured fields do lands in the request (the fields' own tests
// in request_test.cpp check each value).
TEST(OpenAiRequestFields, HonouredFieldsReachTheRequest) {
  json body = base(true);
  body["top_k"] = 5;
  body["ignore_eos"] = true;
  body["max_completion_tokens"] = 7;
  body["n"] = 3;
  body["reasoning_effort"] = "high";
  const GenerationRequest r = parse(true, body);
  EXPECT_EQ(r.reasoning_effort, "high");
  EXPECT_EQ(r.top_k, 5);
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.n, 3);
  json c = base(false);
  c["n"] = 2;
  c["best_of"] = 4;
  c["echo"] = true;
  c["suffix"] = "end";
  const GenerationRequest t = parse(false, c);
  EXPECT_EQ(t.n, 2);
  EXPECT_EQ(t.best_of, 4);
  EXPECT_TRUE(t.echo);
  EXPECT_EQ(t.suffix, "end");
}

// The output's shape: response_format, grammar, json_schema and logit_bias
// land in the request; two constraints at once, a bad type or schema, a
// logit_bias key that is no token id or a bias out of [-100, 100]: 400
// naming the field.
TEST(OpenAiRequestFields, OutputFormatAndLogitBias) {
  auto with = [](bool chat, const char* name, const char* value) {
    json body = base(chat);
    body[name] = json::parse(value);
    return body;
  };
  GenerationRequest r = parse(true, with(true, "response_format", R"({"type": "json_object"})"));
  EXPECT_EQ(r.format.kind, OutputFormat::Kind::JsonObject);
  r = parse(true, with(true, "response_format",
                       R"({"type": "json_schema", "json_schema": {"name": "n", "strict": true,
                           "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}})"));
  EXPECT_EQ(r.format.kind, OutputFormat::Kind::JsonSchema);
  EXPECT_EQ(json::parse(r.format.text), json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}}})"));
  r = parse(true, with(true, "response_format", R"({"type": "text"})"));
  EXPECT_EQ(r.format.kind, OutputFormat::Kind::Text);
  r = parse(false, with(false, "grammar", R"("root ::= [0-9]+")"));
  EXPECT_EQ(r.format.kind, OutputFormat::Kind::Grammar);
  EXPECT_EQ(r.format.text, "root ::= [0-9]+");
  r = parse(false, with(false, "logit_bias", R"({"5": -100, "17": 2.5})"));
  ASSERT_EQ(r.logit_bias.size(), 2u);
  EXPECT_EQ(r.logit_bias[0], std::make_pair(int32_t(17), 2.5f));  // (nlohmann's objects are sorted by key)
  EXPECT_EQ(r.logit_bias[1], std::make_pair(int32_t(5), -100.0f));

  const std::vector<std::tuple<bool, std::string, std::string, std::string>> bad = {
      {true, "response_format", R"({"type": "xml"})", "response_format.type"},
      {true, "response_format", R"("json")", "response_format"},
      {true, "response_format", R"({"type": "json_schema"})", "response_format.json_schema"},
      {true, "response_format", R"({"type": "json_schema", "json_schema": {"schema": 5}})",
       "response_format.json_schema.schema"},
      {false, "grammar", "5", "grammar"},
      {false, "json_schema", R"("object")", "json_schema"},
      {false, "logit_bias", R"({"x": 1})", "logit_bias"},
      {false, "logit_bias", R"({"-3": 1})", "logit_bias"},
      {false, "logit_bias", R"({"5": 101})", "logit_bias"},
      {false, "logit_bias", R"({"5": "1"})", "logit_bias"},
      {false, "logit_bias", "[1]", "logit_bias"},
  };
  for (const auto& [chat, name, value, param] : bad) {
    SCOPED_TRACE(name + " = " + value);
    try {
      parse(chat, with(chat, name.c_str(), value.c_str()));
      ADD_FAILURE() << "taken";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.param, param) << e.what();
    }
  }
  json both = with(true, "response_format", R"({"type": "json_object"})");
  both["grammar"] = "root ::= \"a\"";
  EXPECT_THROW(parse(true, both), ApiError);
}

// The tool fields: the tools for the template, the choice, and a forced
// call's schema as the output's format (tool_request_test.cpp checks their
// shapes, forced_tool_calls_test.cpp the schema).
TEST(OpenAiRequestFields, ToolFieldsReachTheRequest) {
  json body = base(true);
  body["tools"] = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])");
  body["tool_choice"] = "required";
  body["parallel_tool_calls"] = false;
  const GenerationRequest r = parse(true, body);
  EXPECT_EQ(r.tools, body["tools"]);
  EXPECT_EQ(r.tool_choice, "required");
  EXPECT_FALSE(r.parallel_tool_calls);
  EXPECT_EQ(r.format.kind, OutputFormat::Kind::JsonSchema);
  body["tool_choice"] = "auto";
  EXPECT_EQ(parse(true, body).format.kind, OutputFormat::Kind::Text);
}

// Every rule of the table is one of the cases above (a rule added without a
// case, or a case with no rule, fails here).
TEST(OpenAiRequestFields, TheTableAndTheCasesAgree) {
  for (bool chat : {true, false}) {
    const FieldCase* cases = chat ? kChat : kCompletions;
    const size_t n = chat ? std::size(kChat) : std::size(kCompletions);
    const std::vector<FieldRule>& rules = field_rules(chat ? Endpoint::Chat : Endpoint::Completions);
    for (const FieldRule& r : rules) {
      const std::string name = r.name;
      if (name == "messages" || name == "prompt" || name == "stream_options" || name == "top_logprobs") continue;
      bool found = false;
      for (size_t i = 0; i < n; ++i) found |= name == cases[i].name;
      EXPECT_TRUE(found) << (chat ? "chat " : "completions ") << name << " has no case";
    }
    for (size_t i = 0; i < n; ++i) {
      bool found = false;
      for (const FieldRule& r : rules) found |= std::string(r.name) == cases[i].name;
      EXPECT_TRUE(found) << cases[i].name << " has no rule";
    }
  }
}

TEST(OpenAiRequestFields, UnknownFieldsAreRefusedOrListed) {
  for (bool chat : {true, false}) {
    json body = base(chat);
    body["frobnicate"] = 1;
    try {
      parse(chat, body);
      ADD_FAILURE() << "taken";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.param, "frobnicate");
    }
    const GenerationRequest r = parse(chat, body, true);
    EXPECT_EQ(r.unknown_fields, std::vector<std::string>{"frobnicate"});
    body[std::string(100000, 'k')] = 1;  // a long name is cut in the message
    try {
      parse(chat, body);
      ADD_FAILURE() << "taken";
    } catch (const ApiError& e) {
      EXPECT_LT(std::string(e.what()).size(), 1000u);
    }
  }
}

// /v1/embeddings (engine/openai/embeddings.h): the same checks on its own
// table. dimensions is taken here at any positive value; only the model
// knows its size, so a size not its own is refused when the request runs
// (tests/server/openai_embeddings.py, python/tests/test_embeddings.py).
const FieldCase kEmbeddingFields[] = {
    {"input", R"(["a", "b"])", Expect::Honoured},
    {"model", R"("m")", Expect::Honoured},
    {"encoding_format", R"("base64")", Expect::Honoured},
    {"dimensions", "640", Expect::Honoured},
    {"normalize", "false", Expect::Honoured},  // extension
    {"user", R"("u")", Expect::Honoured},
};

TEST(OpenAiRequestFields, EveryEmbeddingsFieldIsHonouredOrRefused) {
  for (const FieldCase& c : kEmbeddingFields) {
    SCOPED_TRACE(std::string("embeddings ") + c.name + " = " + c.value);
    json body = {{"input", "Once"}};
    body[c.name] = json::parse(c.value);
    EXPECT_NO_THROW(parse_embedding_request(body));
    if (std::string(c.name) == "input") continue;  // (required: null is a 400)
    body[c.name] = nullptr;
    EXPECT_NO_THROW(parse_embedding_request(body)) << "null";
  }
  const EmbeddingRequest r = parse_embedding_request(
      json{{"input", "x"}, {"encoding_format", "base64"}, {"dimensions", 640}, {"normalize", false}, {"model", "m"}});
  EXPECT_TRUE(r.base64);
  EXPECT_EQ(r.dimensions, 640);
  EXPECT_FALSE(r.normalize);
  EXPECT_EQ(r.model, "m");
  const std::vector<FieldRule>& rules = field_rules(Endpoint::Embeddings);
  for (const FieldRule& rule : rules) {
    bool found = false;
    for (const FieldCase& c : kEmbeddingFields) found |= std::string(rule.name) == c.name;
    EXPECT_TRUE(found) << "embeddings " << rule.name << " has no case";
  }
  EXPECT_EQ(rules.size(), std::size(kEmbeddingFields));
  // Values of the wrong kind: a 400 naming the field.
  for (const auto& [name, value] : std::vector<std::pair<const char*, const char*>>{
           {"input", "5"}, {"input", R"("")"}, {"input", "[]"}, {"input", R"([1, "a"])"}, {"input", "[[1], []]"},
           {"input", "[-1]"}, {"input", R"([["a"]])"}, {"encoding_format", R"("int8")"}, {"dimensions", "0"},
           {"dimensions", "1.5"}, {"normalize", R"("yes")"}, {"model", "3"}}) {
    json body = {{"input", "Once"}};
    body[name] = json::parse(value);
    try {
      parse_embedding_request(body);
      ADD_FAILURE() << name << " = " << value << " taken";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.param, name) << e.what();
    }
  }
  try {
    parse_embedding_request(json{{"model", "m"}});
    ADD_FAILURE() << "no input taken";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "input");
  }
  json many = {{"input", json::array()}};
  for (int i = 0; i < 2049; ++i) many["input"].push_back("x");
  EXPECT_THROW(parse_embedding_request(many), ApiError);  // OpenAI's 2048 inputs at most
}

TEST(OpenAiRequestFields, UnknownEmbeddingsFieldsAreRefusedOrListed) {
  json body = {{"input", "Once"}, {"frobnicate", 1}};
  try {
    parse_embedding_request(body);
    ADD_FAILURE() << "taken";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "frobnicate");
    EXPECT_NE(std::string(e.what()).find("/v1/embeddings"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse_embedding_request(body, true).unknown_fields, std::vector<std::string>{"frobnicate"});
  // A chat field is unknown here.
  EXPECT_THROW(parse_embedding_request(json{{"input", "x"}, {"temperature", 0}}), ApiError);
}

}  // namespace
}  // namespace weir::openai
