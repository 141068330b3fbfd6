// Constrained decoding's host cost: the time to fill one sequence's mask of
// allowed tokens (XGrammar's matcher, then the UTF-8 mask) on the real
// Gemma 3 vocabulary (262k tokens), along random walks through a JSON
// schema and any JSON object, and 64 masks at once on the grammar's worker
// threads (a 64-sequence batch's step).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <vector>

#include "core/gguf.h"
#include "engine/grammar/grammar.h"
#include "test_env.h"
#include "text/tokenizer.h"

namespace weir {
namespace {

constexpr const char* kSchema = R"({"type": "object", "properties": {
  "name": {"type": "string", "pattern": "([^\"\\\\\\x00-\\x1f]){0,20}"},
  "age": {"type": "integer", "minimum": 0, "maximum": 150},
  "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
  "active": {"type": "boolean"}}, "required": ["name", "age", "active"], "additionalProperties": false})";

void run(const char* what, GrammarSpec spec) {
  const std::string path = test::model_path();
  if (!std::ifstream(path)) GTEST_SKIP() << "no " << path;
  GGUFFile f = GGUFFile::open(path);
  auto tok = Tokenizer::from_gguf(f);
  const int64_t n_vocab = tok->vocab().n_tokens();
  GrammarCompiler compiler(*tok, n_vocab);
  auto t0 = std::chrono::steady_clock::now();
  const auto g = compiler.compile(spec);
  const double compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const int64_t words = allow_words(n_vocab);
  std::vector<uint32_t> mask(static_cast<size_t>(words));
  std::mt19937 rng(1);
  double total = 0, accepting = 0;
  int n = 0;
  for (int walk = 0; walk < 4; ++walk) {
    GrammarState s(g);
    for (int step = 0; step < 100 && !s.terminated(); ++step) {
      const auto a = std::chrono::steady_clock::now();
      s.fill_allowed(mask.data());
      total += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count();
      ++n;
      std::vector<int32_t> ok;
      for (int32_t t = 0; t < n_vocab; ++t)
        if ((mask[size_t(t) / 32] >> (t % 32)) & 1u) ok.push_back(t);
      if (ok.empty()) break;
      const int32_t t = ok[std::uniform_int_distribution<size_t>(0, ok.size() - 1)(rng)];
      const auto c = std::chrono::steady_clock::now();
      s.accept(t);
      accepting += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - c).count();
    }
  }
  // 64 sequences at once, each at its start.
  std::vector<GrammarState> states;
  for (int i = 0; i < 64; ++i) states.emplace_back(g);
  std::vector<GrammarState*> ptrs;
  std::vector<uint32_t> rows(size_t(64 * words));
  std::vector<uint32_t*> row_ptrs;
  for (int i = 0; i < 64; ++i) ptrs.push_back(&states[size_t(i)]), row_ptrs.push_back(&rows[size_t(i * words)]);
  GrammarWorkers workers(0);
  workers.fill_allowed(ptrs, row_ptrs);
  const auto b = std::chrono::steady_clock::now();
  for (int r = 0; r < 10; ++r) workers.fill_allowed(ptrs, row_ptrs);
  const double batch_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - b).count() / 10;
  std::printf("%-12s compile %.0f ms, one mask %.1f us and one token taken %.1f us (means of %d along random walks), "
              "64 masks at once %.0f us\n", what, compile_ms, total / n, accepting / n, n, batch_us);
}

TEST(GrammarMask, JsonSchemaOnGemma3Vocabulary) {
  GrammarSpec s;
  s.kind = GrammarSpec::Kind::JsonSchema;
  s.text = kSchema;
  run("json schema", s);
}

TEST(GrammarMask, AnyObjectOnGemma3Vocabulary) { run("json object", GrammarSpec{GrammarSpec::Kind::JsonObject, ""}); }

}  // namespace
}  // namespace weir
