// Mixture-of-experts files weir does not compute are refused with an error
// naming the key (shared experts, sigmoid gating, scaled expert weights),
// and a qwen3moe file without experts says so.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/error.h"
#include "core/gguf_writer.h"
#include "model/model.h"
#include "model/synth.h"
#include "test_env.h"

namespace weir {
namespace {

// Metadata alone (the builder refuses before it looks for tensors).
std::string write_moe_header(const std::string& name, const std::string& arch,
                             const std::function<void(GGUFWriter&)>& extra) {
  const std::string path = test::own_dir() + "/" + name + ".gguf";
  GGUFWriter w;
  const std::string a = arch + ".";
  w.set_str("general.architecture", arch);
  w.set_u32(a + "embedding_length", 64);
  w.set_u32(a + "block_count", 2);
  w.set_u32(a + "feed_forward_length", 96);
  w.set_u32(a + "attention.head_count", 4);
  w.set_u32(a + "attention.head_count_kv", 2);
  w.set_u32(a + "expert_count", 8);
  w.set_u32(a + "expert_used_count", 2);
  write_synthetic_vocab(w, 300);
  extra(w);
  w.open(path);
  w.close();
  return path;
}

void expect_refused(const std::string& path, const std::string& key) {
  try {
    Model::load(path);
    ADD_FAILURE() << path << " loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
  }
}

TEST(MoeModel, UnsupportedVariantsAreRefusedByKey) {
  for (const char* arch : {"qwen3moe", "llama"}) {
    const std::string a = std::string(arch) + ".";
    expect_refused(write_moe_header(std::string(arch) + "-shared", arch,
                                    [&](GGUFWriter& w) { w.set_u32(a + "expert_shared_count", 2); }),
                   a + "expert_shared_count");
    expect_refused(write_moe_header(std::string(arch) + "-sigmoid", arch,
                                    [&](GGUFWriter& w) { w.set_u32(a + "expert_gating_func", 2); }),
                   a + "expert_gating_func");
    expect_refused(write_moe_header(std::string(arch) + "-scaled", arch,
                                    [&](GGUFWriter& w) { w.set_f32(a + "expert_weights_scale", 2.5f); }),
                   a + "expert_weights_scale");
    expect_refused(write_moe_header(std::string(arch) + "-too-many", arch,
                                    [&](GGUFWriter& w) { w.set_u32(a + "expert_used_count", 9); }),
                   a + "expert_used_count");
  }
  expect_refused(write_moe_header("qwen3moe-none", "qwen3moe", [](GGUFWriter& w) { w.remove("qwen3moe.expert_count"); }),
                 "qwen3moe.expert_count");
  // A supported file without its expert tensors names the first missing.
  expect_refused(write_moe_header("qwen3moe-plain", "qwen3moe", [](GGUFWriter&) {}), "token_embd.weight");
}

}  // namespace
}  // namespace weir
