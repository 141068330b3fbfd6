// Gemma 3 270M on the CPU against llama.cpp's most precise path
// (../shared/ref/*.nofa-f32kv.jsonl: flash attention off, f32 KV cache); the
// checks live in gemma3_reference.h, which the GPU tests share.
#include "gemma3_reference.h"

#include <gtest/gtest.h>

#include <memory>

#include "backend/cpu/cpu_backend.h"
#include "model/model.h"
#include "test_env.h"

namespace weir {
namespace {

struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<CpuBackend> backend;
};

Loaded& loaded(const std::string& path) {
  static Loaded l = [&] {
    Loaded x;
    x.model = Model::load(path);
    x.backend = std::make_unique<CpuBackend>(2);
    return x;
  }();
  return l;
}

TEST(Gemma3Reference, ModelShape) {
  WEIR_REQUIRE_MODEL(path);
  const HParams& h = loaded(path).model->hparams();
  EXPECT_EQ(h.n_layer, 18);
  EXPECT_EQ(h.n_embd, 640);
  EXPECT_EQ(h.n_head, 4);
  EXPECT_EQ(h.n_head_kv, 1);
  EXPECT_EQ(h.head_dim_k, 256);
  EXPECT_EQ(h.n_swa, 512);
  EXPECT_EQ(h.n_vocab, 262144);
  for (int il = 0; il < 18; ++il) EXPECT_EQ(h.is_swa[size_t(il)], (il + 1) % 6 != 0) << il;
}

TEST(Gemma3Reference, GreedyContinuationsMatch) {
  WEIR_REQUIRE_MODEL(path);
  Loaded& l = loaded(path);
  test::gemma3::expect_greedy_matches(*l.model, *l.backend);
}

TEST(Gemma3Reference, LogitsMatchTop50) {
  WEIR_REQUIRE_MODEL(path);
  Loaded& l = loaded(path);
  test::gemma3::expect_logits_match(*l.model, *l.backend);
}

// With llama.cpp's activation rounding, as users run it: how far from the
// float64 forward pass (the GPU tests hold the GPU to the same bound).
TEST(Gemma3Reference, RoundedPathNearFloat64) {
  WEIR_REQUIRE_MODEL(path);
  Loaded& l = loaded(path);
  const auto d = test::gemma3::distance_to_float64(*l.model, *l.backend, "cpu");
  EXPECT_LT(d.max_kl, 0.01);
}

}  // namespace
}  // namespace weir
