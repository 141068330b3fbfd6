// The hints the models put on their attention nodes (core/graph.h): gemma3's
// sliding-window layers carry the window as max_keys, its global layers and
// llama's none. Checked against the model's own hyperparameters, on the tiny
// models tests/reference/tiny_models.py writes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/collective.h"
#include "core/graph.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "tiny_models.h"

namespace weir {
namespace {

std::vector<int32_t> max_keys_hints(const Model& m) {
  CpuBackend backend(1);
  KVCache kv(m.hparams(), 32, DType::F32, backend);
  const ForwardGraph fg = m.build(1, 32, 1, kv, false, TensorParallel{});
  std::vector<int32_t> hints;  // in layer order: nodes are made in that order
  for (const Tensor& t : fg.graph->tensors())
    if (t.op == Op::Attention) hints.push_back(t.iparams[1]);
  return hints;
}

TEST(AttentionHints, Gemma3WindowOnSlidingLayersOnly) {
  WEIR_TINY_MODEL(dir, "gemma3", "exact");
  const auto model = Model::load(dir + "/gemma3.gguf");
  const HParams& h = model->hparams();
  ASSERT_GT(h.n_swa, 0);
  const std::vector<int32_t> hints = max_keys_hints(*model);
  ASSERT_EQ(int64_t(hints.size()), h.n_layer);
  int global = 0;
  for (int64_t il = 0; il < h.n_layer; ++il) {
    EXPECT_EQ(hints[size_t(il)], h.is_swa[size_t(il)] ? int32_t(h.n_swa) : 0) << "layer " << il;
    global += h.is_swa[size_t(il)] ? 0 : 1;
  }
  EXPECT_GT(global, 0) << "the tiny model should have a global layer too";
}

TEST(AttentionHints, LlamaNone) {
  WEIR_TINY_MODEL(dir, "llama3", "exact");
  const auto model = Model::load(dir + "/llama3.gguf");
  for (int32_t hint : max_keys_hints(*model)) EXPECT_EQ(hint, 0);
}

}  // namespace
}  // namespace weir
