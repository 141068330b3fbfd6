// model_desc: llama-bench's model description, and the bytes a decoded
// token reads, checked against counts made here from the GGUF reader's
// tensor list and the hyper-parameters.
#include "model/model_desc.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "core/gguf.h"
#include "model/model.h"
#include "model/synth.h"
#include "model/synth_presets.h"
#include "test_env.h"

namespace weir {
namespace {

std::string synth_tiny(const std::string& arch, FileType ft) {
  const std::string path = weir::test::own_dir() + "/model-desc-" + arch + ".gguf";
  SynthOptions o;
  o.sync = false;
  o.file_type = ft;
  write_synth_model(find_synth_preset(arch, "tiny"), o, path);
  return path;
}

// Every tensor's bytes from the reader; the embedding counted as one row
// when an output matrix exists, as itself plus one row when it is tied.
uint64_t expected_weight_bytes(const GGUFFile& f) {
  uint64_t all = 0, embd = 0, embd_row = 0;
  for (const auto& t : f.tensors()) {
    all += t.nbytes;
    if (t.name == "token_embd.weight") embd = t.nbytes, embd_row = t.nbytes / uint64_t(t.ne[1]);
  }
  EXPECT_GT(embd, 0u);
  const bool tied = f.find_tensor("output.weight") == nullptr;
  return all - embd + embd_row + (tied ? embd : 0);
}

TEST(ModelDesc, DecodeWeightBytesTiedAndUntied) {
  for (const char* arch : {"gemma3", "qwen2"}) {
    SCOPED_TRACE(arch);
    const std::string path = synth_tiny(arch, FileType::Q8_0);
    GGUFFile f = GGUFFile::open(path);
    EXPECT_EQ(decode_weight_bytes(f), expected_weight_bytes(f));
    // gemma3's output matrix is tied; qwen2.5's is not: both cases are covered.
    EXPECT_EQ(f.find_tensor("output.weight") == nullptr, std::string(arch) == "gemma3");
  }
}

TEST(ModelDesc, KvBytesFollowTheSlidingWindow) {
  auto gemma = Model::load(synth_tiny("gemma3", FileType::MOSTLY_F16));
  const HParams& g = gemma->hparams();
  // tiny gemma3: 2 layers, both sliding-window (every 6th layer is global), window 128,
  // one KV head of 64: K and V rows of 64 values per cell.
  ASSERT_EQ(g.n_layer, 2);
  ASSERT_EQ(g.n_swa, 128);
  EXPECT_EQ(decode_kv_bytes(g, DType::F16, 100), 2u * 100 * (64 * 2 + 64 * 2));
  EXPECT_EQ(decode_kv_bytes(g, DType::F16, 1000), 2u * 128 * (64 * 2 + 64 * 2));
  EXPECT_EQ(decode_kv_bytes(g, DType::F32, 1000), 2u * 128 * (64 * 4 + 64 * 4));
  auto qwen = Model::load(synth_tiny("qwen2", FileType::MOSTLY_F16));
  const HParams& q = qwen->hparams();
  ASSERT_EQ(q.n_swa, 0);
  // 2 layers, 2 KV heads of 64: no window, every cell is read.
  EXPECT_EQ(decode_kv_bytes(q, DType::F16, 1000), 2u * 1000 * (128 * 2 + 128 * 2));
  EXPECT_EQ(decode_kv_bytes(q, DType::F16, 0), 0u);
}

TEST(ModelDesc, Description) {
  GGUFFile f = GGUFFile::open(synth_tiny("gemma3", FileType::Q4_K_M));
  const std::string d = model_description(f);
  EXPECT_EQ(d.rfind("gemma3 ", 0), 0u) << d;
  EXPECT_NE(d.find(" Q4_K - Medium"), std::string::npos) << d;
  EXPECT_STREQ(file_type_description(0), "all F32");
  EXPECT_STREQ(file_type_description(7), "Q8_0");
  EXPECT_STREQ(file_type_description(18), "Q6_K");
  EXPECT_STREQ(file_type_description(25), "IQ4_NL - 4.5 bpw");  // llama.cpp's llama_model_ftype_name
  EXPECT_STREQ(file_type_description(30), "IQ4_XS - 4.25 bpw");
  EXPECT_STREQ(file_type_description(38), "MXFP4 MoE");
  EXPECT_STREQ(file_type_description(999), "unknown, may not work");
}

TEST(ModelDesc, RealModelLabel) {
  const char* env = std::getenv("WEIR_TEST_MODEL");
  const std::string path = env && *env ? env : WEIR_DEFAULT_TEST_MODEL;
  if (path.empty() || !std::ifstream(path)) GTEST_SKIP() << "model not found: " << path;
  GGUFFile f = GGUFFile::open(path);
  // What llama-bench prints for this file.
  EXPECT_EQ(model_description(f), "gemma3 270M Q4_K - Medium");
}

}  // namespace
}  // namespace weir
