// weir synth as a user meets it: preset lists, errors, a written file that
// weir run and the GGUF reader accept, --vocab, --layers.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "core/gguf.h"
#include "test_env.h"

namespace {

struct Result {
  int code = -1;
  std::string out;  // stdout and stderr
};

Result weir(const std::string& args) {
  const std::string cmd = weir::test::weir_bin() + " " + args + " 2>&1";
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

TEST(SynthCli, ListsPresets) {
  Result r = weir("synth");
  EXPECT_EQ(r.code, 0);
  for (const char* p : {"llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "qwen3-8b",
                        "gemma3-270m", "phi-3-mini", "phi-4", "gemma-2-9b", "tiny"})
    EXPECT_TRUE(has(r.out, p)) << p << "\n" << r.out;
  r = weir("synth --arch qwen3");
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(has(r.out, "qwen3-8b"));
  EXPECT_FALSE(has(r.out, "llama-3.1-8b")) << r.out;
}

TEST(SynthCli, Errors) {
  const std::string out = weir::test::own_dir() + "/synth-err.gguf";
  Result r = weir("synth --arch llama --preset qwen3-8b --type F16 -o " + out);
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.out, "qwen3 model, not llama")) << r.out;
  r = weir("synth --arch mamba --preset tiny --type F16 -o " + out);
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.out, "mamba")) << r.out;
  r = weir("synth --arch gemma3 --preset tiny --type F17 -o " + out);
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.out, "F17")) << r.out;
  r = weir("synth --arch gemma3 --preset tiny -o " + out);
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.out, "--type")) << r.out;
  r = weir("synth --arch gemma3 --preset tiny --type F16");
  EXPECT_EQ(r.code, 2);
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(SynthCli, WritesAModelThatRuns) {
  const std::string out = weir::test::own_dir() + "/synth-cli-gemma3.gguf";
  Result r = weir("synth --arch gemma3 --preset tiny --type F16 --layers 3 --seed 5 -t 2 -o " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "MB/s")) << r.out;
  {
    weir::GGUFFile f = weir::GGUFFile::open(out);
    EXPECT_EQ(f.get_str("general.architecture"), "gemma3");
    EXPECT_EQ(f.get_uint("gemma3.block_count"), 3u);
    EXPECT_EQ(f.get_uint("general.file_type"), 1u);
    EXPECT_NE(f.find_tensor("blk.2.post_ffw_norm.weight"), nullptr);
    EXPECT_EQ(f.find_tensor("output.weight"), nullptr);  // tied
  }
  r = weir("run -m " + out + " -p hello -n 16 --temp 0 --ignore-eos -t 1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "generation 16 tokens")) << r.out;
  std::filesystem::remove(out);
}

// phi3: fused attn_qkv and ffn_up as synth writes them (Q8_0), and a run of it.
TEST(SynthCli, WritesAPhi3ThatRuns) {
  const std::string out = weir::test::own_dir() + "/synth-cli-phi3.gguf";
  Result r = weir("synth --arch phi3 --preset tiny --type Q8_0 --seed 7 -t 2 -o " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  {
    weir::GGUFFile f = weir::GGUFFile::open(out);
    EXPECT_EQ(f.get_str("general.architecture"), "phi3");
    EXPECT_EQ(f.get_uint("phi3.rope.scaling.original_context_length"), 8192u);
    const weir::GGUFTensorInfo* qkv = f.find_tensor("blk.1.attn_qkv.weight");
    ASSERT_NE(qkv, nullptr);
    EXPECT_EQ(qkv->ne[1], 4 * 64 + 2 * 2 * 64);  // q rows, then k and v rows
    EXPECT_EQ(f.find_tensor("blk.1.ffn_up.weight")->ne[1], 2 * 512);  // gate rows, then up rows
    EXPECT_EQ(f.find_tensor("blk.1.attn_q.weight"), nullptr);
    EXPECT_EQ(f.find_tensor("blk.1.ffn_gate.weight"), nullptr);
  }
  r = weir("run -m " + out + " -p hello -n 16 --temp 0 --ignore-eos -t 1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "generation 16 tokens")) << r.out;
  std::filesystem::remove(out);
}

// gemma2: the soft caps and the window as llama.cpp's converter writes them,
// and a run of it.
TEST(SynthCli, WritesAGemma2ThatRuns) {
  const std::string out = weir::test::own_dir() + "/synth-cli-gemma2.gguf";
  Result r = weir("synth --arch gemma2 --preset tiny --type Q8_0 --seed 3 -t 2 -o " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  {
    weir::GGUFFile f = weir::GGUFFile::open(out);
    EXPECT_EQ(f.get_str("general.architecture"), "gemma2");
    EXPECT_EQ(f.get_float_or("gemma2.attn_logit_softcapping", 0), 50.0);
    EXPECT_EQ(f.get_float_or("gemma2.final_logit_softcapping", 0), 30.0);
    EXPECT_EQ(f.get_uint("gemma2.attention.sliding_window"), 128u);
    EXPECT_NE(f.find_tensor("blk.1.post_ffw_norm.weight"), nullptr);
    EXPECT_EQ(f.find_tensor("blk.1.attn_q_norm.weight"), nullptr);
    EXPECT_EQ(f.find_tensor("output.weight"), nullptr);  // tied
  }
  r = weir("run -m " + out + " -p hello -n 16 --temp 0 --ignore-eos -t 1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "generation 16 tokens")) << r.out;
  std::filesystem::remove(out);
}

TEST(SynthCli, VocabFromAnotherFile) {
  const std::string vocab = weir::test::ref_dir() + "/qwen2-vocab-deepseek-r1.gguf";
  if (!std::filesystem::exists(vocab)) GTEST_SKIP() << vocab << " not found";
  const std::string out = weir::test::own_dir() + "/synth-cli-qwen2.gguf";
  Result r = weir("synth --arch qwen2 --preset tiny --type F32 --vocab " + vocab + " -o " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "note")) << r.out;  // 152064 tokens instead of tiny's 512
  weir::GGUFFile f = weir::GGUFFile::open(out), v = weir::GGUFFile::open(vocab);
  const weir::GGUFTensorInfo* e = f.find_tensor("token_embd.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->ne[1], 152064);
  EXPECT_EQ(f.find_tensor("output.weight")->ne[1], 152064);
  EXPECT_NE(f.find_tensor("blk.0.attn_k.bias"), nullptr);
  size_t n = 0;
  for (const auto& [key, val] : v.kvs()) {
    if (key.rfind("tokenizer.", 0) != 0) continue;
    ++n;
    const weir::GGUFValue* w = f.find(key);
    ASSERT_NE(w, nullptr) << key;
    EXPECT_EQ(w->type, val.type) << key;
    EXPECT_EQ(w->count, val.count) << key;
  }
  EXPECT_GE(n, 8u);
  EXPECT_EQ(f.get_str("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_str_array("tokenizer.ggml.merges")[100], v.get_str_array("tokenizer.ggml.merges")[100]);
  EXPECT_EQ(f.get_str("general.architecture"), "qwen2");  // not copied from the vocab file
  std::filesystem::remove(out);
}

}  // namespace
