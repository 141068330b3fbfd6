// Synthetic models (weir synth): the tiny preset of each architecture weir
// can run loads, tokenizes with its synthetic vocabulary, and generates 4096
// tokens greedily with every step's logits finite and not all equal, and
// not one token repeated throughout (the weight scales keep activations alive
// over a long context).
#include "model/synth.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/gguf.h"
#include "core/error.h"
#include "core/thread_group.h"
#include "engine/session.h"
#include "model/model.h"
#include "test_env.h"

namespace weir {
namespace {

std::string synth_tiny(const std::string& arch, const std::string& tag,
                       std::function<DType(const SynthTensor&)> type_of = {}) {
  const std::string path = weir::test::own_dir() + "/synth-" + arch + "-" + tag + ".gguf";
  SynthOptions o;
  o.threads = 2;
  o.sync = false;
  o.type_of = std::move(type_of);
  write_synth_model(find_synth_preset(arch, "tiny"), o, path);
  return path;
}

// Greedy generation of n tokens; fails on the first step whose logits are
// not finite or all equal.
void generate(const std::string& path, int n) {
  auto model = Model::load(path);
  CpuBackend backend(1);  // one thread: no barrier stalls on a loaded machine
  std::vector<int32_t> ids = model->tokenizer().encode("Hello, synthetic world!", true, true);
  ASSERT_GT(ids.size(), 2u);
  SessionParams sp;
  sp.n_ctx = n + int64_t(ids.size()) + 1;
  Session s(*model, backend, sp);
  s.eval(ids);
  const int64_t V = s.n_vocab();
  int distinct_tokens = 0;
  std::vector<bool> seen(size_t(V), false);
  for (int step = 0; step < n; ++step) {
    const float* l = s.logits();
    float lo = l[0], hi = l[0];
    int32_t best = 0;
    for (int64_t v = 0; v < V; ++v) {
      if (!std::isfinite(l[v])) FAIL() << "step " << step << ": logit " << v << " is " << l[v];
      lo = std::min(lo, l[v]);
      if (l[v] > hi) hi = l[v], best = int32_t(v);
    }
    ASSERT_GT(hi - lo, 1e-3f) << "step " << step << ": all logits equal (" << lo << ")";
    if (!seen[size_t(best)]) seen[size_t(best)] = true, ++distinct_tokens;
    const int32_t next[1] = {best};
    s.eval(next);
  }
  std::printf("%s: %d tokens, %d distinct\n", path.c_str(), n, distinct_tokens);
  // Random weights settle into short cycles, but not into repeating one token.
  EXPECT_GE(distinct_tokens, 2);
}

#define REQUIRE_ARCH(arch) \
  if (!architectures().count(arch)) GTEST_SKIP() << "architecture " << (arch) << " is not in this build yet"

TEST(Synth, PresetsMatchTheRealModelsParameterCounts) {
  auto params = [](const char* arch, const char* name) {
    uint64_t n = 0;
    for (const SynthTensor& t : synth_tensors(find_synth_preset(arch, name))) n += uint64_t(t.n_elements());
    return n;
  };
  // The published sizes (safetensors totals, plus rope_freqs for llama 3.x).
  EXPECT_EQ(params("llama", "llama-3.2-1b"), 1235814400u + 32u);
  EXPECT_EQ(params("llama", "llama-3.1-8b"), 8030261248u + 64u);
  EXPECT_EQ(params("qwen2", "qwen2.5-7b"), 7615616512u);
  EXPECT_EQ(params("qwen3", "qwen3-8b"), 8190735360u);
  EXPECT_EQ(params("gemma3", "gemma3-270m"), 268098176u);
  EXPECT_EQ(params("qwen3moe", "qwen3-30b-a3b"), 30532122624u);  // "30.5B"
  EXPECT_EQ(params("llama", "mixtral-8x7b"), 46702792704u);       // "46.7B"
  EXPECT_EQ(params("phi3", "phi-3-mini"), 3821079552u);           // "3.82B"
  EXPECT_EQ(params("phi3", "phi-4"), 14659507200u);               // "14.7B"
  EXPECT_EQ(params("bert", "bge-small"), 33360000u - 147840u);  // "33.4M" less the pooler the converter drops
  EXPECT_EQ(params("nomic-bert", "nomic-embed-text"), 136731648u);  // "137M", the embedding padded to 30528 rows
  EXPECT_EQ(params("gemma2", "gemma-2-9b"), 9241705984u);        // "9.24B"
  EXPECT_EQ(params("gpt-oss", "gpt-oss-20b"), 20914757184u);    // "20.9B" (3.6B active)
  EXPECT_EQ(params("gpt-oss", "gpt-oss-120b"), 116829156672u);  // "116.8B"
  EXPECT_THROW(find_synth_preset("llama", "qwen3-8b"), Error);
  EXPECT_THROW(find_synth_preset("llama", "nope"), Error);
  EXPECT_THROW(find_synth_preset("nope", "tiny"), Error);
}

TEST(Synth, Llama3RopeFactors) {
  const std::vector<float> f = llama3_rope_factors(find_synth_preset("llama", "llama-3.1-8b"));
  ASSERT_EQ(f.size(), 64u);
  EXPECT_EQ(f.front(), 1.0f);  // short wavelengths keep their frequency
  EXPECT_EQ(f.back(), 8.0f);   // long ones are divided by the factor
  for (size_t i = 1; i < f.size(); ++i) EXPECT_GE(f[i], f[i - 1]);
}

TEST(Synth, TinyGemma3LoadsAndTokenizes) {
  const std::string path = synth_tiny("gemma3", "f16");
  auto model = Model::load(path);
  EXPECT_EQ(model->hparams().n_vocab, 512);
  EXPECT_EQ(model->hparams().n_layer, 2);
  EXPECT_EQ(model->hparams().n_swa, 128);
  const Tokenizer& tok = model->tokenizer();
  const std::string text = "Hello, world! \xc3\xa9";  // é goes through byte fallback
  const std::vector<int32_t> ids = tok.encode(text, false, false);
  EXPECT_FALSE(ids.empty());
  EXPECT_EQ(tok.decode(ids, false), text);
}

// Generator threads that cannot all start: an error, no file, no partial file.
TEST(Synth, ThreadsThatCannotStartLeaveNothing) {
  const std::string path = weir::test::own_dir() + "/threads-fail.gguf";
  SynthOptions o;
  o.threads = 4;
  o.sync = false;
  ThreadGroup::fail_after_for_testing(2);
  EXPECT_THROW(write_synth_model(find_synth_preset("llama", "tiny"), o, path), ThreadStartError);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".part"));
}

TEST(Synth, SameSeedSameFile) {
  const std::string a = synth_tiny("gemma3", "seed-a"), b = synth_tiny("gemma3", "seed-b");
  GGUFFile fa = GGUFFile::open(a), fb = GGUFFile::open(b);
  ASSERT_EQ(fa.size(), fb.size());
  EXPECT_EQ(std::memcmp(fa.base(), fb.base(), fa.size()), 0);
}

TEST(Synth, TinyGemma3Generates4096Tokens) { generate(synth_tiny("gemma3", "f16"), 4096); }

// Quantized weights run too (types set directly: the file-type mixtures
// come with the quantizers).
TEST(Synth, TinyGemma3KQuantsGenerate) {
  generate(synth_tiny("gemma3", "kq", [](const SynthTensor& t) {
             if (t.n_dims < 2) return DType::F32;
             if (t.name == "token_embd.weight") return DType::Q8_0;
             return t.name.find("ffn_down") != std::string::npos ? DType::Q6_K : DType::Q4_K;
           }),
           512);
}

TEST(Synth, TinyLlamaGenerates4096Tokens) {
  REQUIRE_ARCH("llama");
  generate(synth_tiny("llama", "f16"), 4096);
}

TEST(Synth, TinyQwen2Generates4096Tokens) {
  REQUIRE_ARCH("qwen2");
  generate(synth_tiny("qwen2", "f16"), 4096);
}

TEST(Synth, TinyQwen3Generates4096Tokens) {
  REQUIRE_ARCH("qwen3");
  generate(synth_tiny("qwen3", "f16"), 4096);
}

// Fused attn_qkv and ffn_up (gate and up rows), GQA 4:2.
TEST(Synth, TinyPhi3Generates4096Tokens) { generate(synth_tiny("phi3", "f16"), 4096); }

// Soft-capped attention and logits, every other layer a window of 128
// (decoding runs far past it).
TEST(Synth, TinyGemma2Generates4096Tokens) { generate(synth_tiny("gemma2", "f16"), 4096); }

// A mixture of experts in K-quants (the router stays F32, as llama.cpp
// keeps it).
TEST(Synth, TinyQwen3MoeKQuantsGenerate) {
  generate(synth_tiny("qwen3moe", "kq", [](const SynthTensor& t) {
             if (t.n_dims < 2 || t.name.find("ffn_gate_inp") != std::string::npos) return DType::F32;
             return t.name.find("ffn_down") != std::string::npos ? DType::Q6_K : DType::Q4_K;
           }),
           512);
}

}  // namespace
}  // namespace weir
