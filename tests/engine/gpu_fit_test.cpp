// --fit's placement rule (engine/gpu_fit.h) on hand-computed cases: no GPU
// is asked anything. Then fit_input's view of a real (tiny) model: every
// weight counted once, -ot's CPU weights left out.
#include "engine/gpu_fit.h"

#include <gtest/gtest.h>

#include <numeric>

#include "engine/runtime.h"
#include "model/kv_cache.h"
#include "tiny_synth.h"

namespace weir {
namespace {

// n layers of `layer` bytes (and `expert` bytes of experts each when > 0),
// a head, a KV cache per layer, and a budget of exactly `budget` bytes
// (free = budget + margin 100, no cap).
FitInput input(int n, uint64_t layer, uint64_t expert, uint64_t head, uint64_t kv, uint64_t budget) {
  FitInput in;
  in.layer_bytes.assign(size_t(n), layer);
  if (expert > 0) in.expert_bytes.assign(size_t(n), expert);
  in.head_bytes = head;
  in.kv_bytes_per_layer = kv;
  in.margin_bytes = 100;
  in.free_bytes = budget + 100;
  return in;
}

TEST(GpuFit, EverythingFits) {
  // 4 x (100 + KV 10) + head 50 = 490 of 900.
  const FitPlan p = plan_gpu_fit(input(4, 100, 0, 50, 10, 900));
  EXPECT_EQ(p.n_gpu_layers, 5);  // -ngl 5: the head too
  EXPECT_TRUE(p.head_on_gpu());
  EXPECT_EQ(p.weight_bytes, 450u);
  EXPECT_EQ(p.kv_bytes, 40u);
  EXPECT_EQ(p.budget, 900u);
  EXPECT_FALSE(p.moe);
  EXPECT_EQ(p.flags(), "-ngl 5");
}

TEST(GpuFit, NothingFits) {
  EXPECT_EQ(plan_gpu_fit(input(4, 100, 0, 50, 10, 109)).n_gpu_layers, 0);  // a layer and its KV: 110
  EXPECT_EQ(plan_gpu_fit(input(4, 100, 0, 50, 10, 110)).n_gpu_layers, 1);
  // The margin more than the free memory: no budget at all.
  FitInput in = input(4, 100, 0, 50, 10, 0);
  in.free_bytes = 50;
  const FitPlan p = plan_gpu_fit(in);
  EXPECT_EQ(p.budget, 0u);
  EXPECT_EQ(p.n_gpu_layers, 0);
  EXPECT_EQ(p.weight_bytes + p.kv_bytes, 0u);
}

TEST(GpuFit, LayersFromTheLastBackwards) {
  // 350: three layers (330); the fourth would make 440.
  FitPlan p = plan_gpu_fit(input(4, 100, 0, 50, 10, 350));
  EXPECT_EQ(p.n_gpu_layers, 3);
  EXPECT_FALSE(p.head_on_gpu());
  EXPECT_EQ(p.weight_bytes, 300u);
  EXPECT_EQ(p.kv_bytes, 30u);
  // A big last layer: taken (as -ngl 1), although two small ones would fit
  // instead; -ngl takes the last N layers, no others.
  FitInput in = input(4, 100, 0, 50, 10, 350);
  in.layer_bytes = {100, 100, 100, 300};
  p = plan_gpu_fit(in);
  EXPECT_EQ(p.n_gpu_layers, 1);
  EXPECT_EQ(p.weight_bytes, 300u);
}

TEST(GpuFit, TheCapBindsWhenSmallerThanFree) {
  FitInput in = input(4, 100, 0, 50, 10, 900);  // free 1000
  in.cap_bytes = 450;                           // usable 450, budget 350
  FitPlan p = plan_gpu_fit(in);
  EXPECT_EQ(p.usable, 450u);
  EXPECT_EQ(p.budget, 350u);
  EXPECT_EQ(p.n_gpu_layers, 3);
  in.cap_bytes = 5000;  // more than free: free binds
  p = plan_gpu_fit(in);
  EXPECT_EQ(p.usable, 1000u);
  EXPECT_EQ(p.n_gpu_layers, 5);
}

TEST(GpuFit, TheHeadOnlyWithEveryLayer) {
  // Every layer fits (440) but not the head with them (490 > 460).
  FitPlan p = plan_gpu_fit(input(4, 100, 0, 50, 10, 460));
  EXPECT_EQ(p.n_gpu_layers, 4);
  EXPECT_FALSE(p.head_on_gpu());
  EXPECT_EQ(p.weight_bytes, 400u);
  // Exactly enough: 490 of 490.
  p = plan_gpu_fit(input(4, 100, 0, 50, 10, 490));
  EXPECT_EQ(p.n_gpu_layers, 5);
  // A small head never goes before the layers: 3 layers (330) leave 40,
  // enough for a head of 30, which stays on the CPU.
  p = plan_gpu_fit(input(4, 100, 0, 30, 10, 370));
  EXPECT_EQ(p.n_gpu_layers, 3);
  EXPECT_EQ(p.weight_bytes, 300u);
}

TEST(GpuFit, FixedWeightsAreChargedFirst) {
  FitInput in = input(4, 100, 0, 50, 10, 350);
  in.fixed_bytes = 100;  // -ot sent 100 bytes to the GPU: two layers fit (100 + 220)
  const FitPlan p = plan_gpu_fit(in);
  EXPECT_EQ(p.n_gpu_layers, 2);
  EXPECT_EQ(p.weight_bytes, 300u);
}

TEST(GpuFit, MixtureOfExpertsTakesTheExpertsLast) {
  // 4 layers: 50 bytes of attention and shared weights, 200 of experts,
  // KV 10; head 40. Without the experts: 4 x 60 + 40 = 280.
  // Budget 700: everything but the experts (280), then layer 3's experts
  // (480), layer 2's (680); layer 1's would make 880.
  FitPlan p = plan_gpu_fit(input(4, 50, 200, 40, 10, 700));
  EXPECT_TRUE(p.moe);
  EXPECT_EQ(p.n_gpu_layers, 5);
  EXPECT_FALSE(p.cpu_moe);
  EXPECT_EQ(p.n_cpu_moe, 2);
  EXPECT_EQ(p.weight_bytes, 640u);
  EXPECT_EQ(p.kv_bytes, 40u);
  EXPECT_EQ(p.flags(), "-ngl 5 -ncmoe 2");
  // Everything fits: no expert on the CPU.
  p = plan_gpu_fit(input(4, 50, 200, 40, 10, 1080));
  EXPECT_EQ(p.n_gpu_layers, 5);
  EXPECT_EQ(p.n_cpu_moe, 0);
  EXPECT_FALSE(p.cpu_moe);
  EXPECT_EQ(p.flags(), "-ngl 5");
  // The layers and head fit, no layer's experts: --cpu-moe.
  p = plan_gpu_fit(input(4, 50, 200, 40, 10, 300));
  EXPECT_EQ(p.n_gpu_layers, 5);
  EXPECT_TRUE(p.cpu_moe);
  EXPECT_EQ(p.flags(), "-ngl 5 -cmoe");
  // Not even every layer without its experts (280 > 200): the experts all
  // on the CPU, the layers' other weights from the last backwards (3 x 60).
  p = plan_gpu_fit(input(4, 50, 200, 40, 10, 200));
  EXPECT_TRUE(p.cpu_moe);
  EXPECT_EQ(p.n_gpu_layers, 3);
  EXPECT_EQ(p.weight_bytes, 150u);
  EXPECT_EQ(p.flags(), "-ngl 3 -cmoe");
}

TEST(GpuFit, ExpertsAlreadyOnTheCpuCountAsDense) {
  // --cpu-moe by hand: fit_input leaves every expert out (all zero).
  FitInput in = input(4, 50, 0, 40, 10, 300);
  in.expert_bytes.assign(4, 0);
  const FitPlan p = plan_gpu_fit(in);
  EXPECT_FALSE(p.moe);
  EXPECT_EQ(p.n_gpu_layers, 5);
  EXPECT_FALSE(p.cpu_moe);
}

TEST(GpuFit, Margin) {
  EXPECT_EQ(fit_margin(0), uint64_t(768) << 20);
  EXPECT_EQ(fit_margin(uint64_t(20) << 30), (uint64_t(768) << 20) + (uint64_t(1) << 30));  // + 5%
}

TEST(GpuFit, TheReportSaysWhatWentWhere) {
  const uint64_t GiB = uint64_t(1) << 30;
  FitInput in;
  in.layer_bytes.assign(32, GiB / 4);
  in.head_bytes = GiB / 2;
  in.kv_bytes_per_layer = GiB / 64;
  in.free_bytes = 6 * GiB;
  in.margin_bytes = GiB;
  FitPlan p = plan_gpu_fit(in);  // budget 5 GiB: 18 layers of 0.265625 GiB (4.78)
  EXPECT_EQ(p.n_gpu_layers, 18);
  std::string s = describe_fit(p, in, "CUDA0");
  EXPECT_NE(s.find("fit: 18 of 32 layers on CUDA0, output head on the CPU (-ngl 18)"), std::string::npos) << s;
  EXPECT_NE(s.find("weights 4.50 GiB + KV cache 0.28 GiB of a 5.00 GiB budget (6.00 GiB free, less a 1.00 GiB margin"),
            std::string::npos)
      << s;
  in.cap_bytes = 3 * GiB;
  p = plan_gpu_fit(in);
  s = describe_fit(p, in, "CUDA0");
  EXPECT_NE(s.find("--fit-vram 3.00 GiB of 6.00 GiB free"), std::string::npos) << s;
  in.cap_bytes = GiB / 2;
  p = plan_gpu_fit(in);
  s = describe_fit(p, in, "CUDA1");
  EXPECT_NE(s.find("fit: no layer fits CUDA1"), std::string::npos) << s;
  EXPECT_NE(s.find("everything on the CPU"), std::string::npos) << s;
  in.cap_bytes = 0;
  in.free_bytes = 20 * GiB;
  p = plan_gpu_fit(in);
  s = describe_fit(p, in, "CUDA0");
  EXPECT_NE(s.find("fit: all 32 layers and the output head on CUDA0 (-ngl 33)"), std::string::npos) << s;
  // A mixture of experts.
  FitInput moe = input(4, 50, 200, 40, 10, 700);
  s = describe_fit(plan_gpu_fit(moe), moe, "CUDA0");
  EXPECT_NE(s.find("all 4 layers and the output head on CUDA0, the experts of the first 2 layers on the CPU "
                   "(-ngl 5 -ncmoe 2)"),
            std::string::npos)
      << s;
  moe = input(4, 50, 200, 40, 10, 200);
  s = describe_fit(plan_gpu_fit(moe), moe, "CUDA0");
  EXPECT_NE(s.find("3 of 4 layers on CUDA0, output head on the CPU, every layer's experts on the CPU (-ngl 3 -cmoe)"),
            std::string::npos)
      << s;
}

// fit_input on a tiny dense model: each weight once, in its layer or the
// head; -ot's CPU weights out, its GPU weights fixed.
TEST(GpuFit, InputFromAModel) {
  const std::string path = test::synth_tiny("llama", "gpu-fit");
  const auto m = Model::load(path);
  const int64_t n_layer = m->hparams().n_layer;
  RuntimeSpec s;
  s.n_ctx = 256;
  s.kv_type = DType::F16;
  FitInput in = fit_input(*m, s, "CUDA0");
  ASSERT_EQ(int64_t(in.layer_bytes.size()), n_layer);
  EXPECT_TRUE(in.expert_bytes.empty());
  const uint64_t layers = std::accumulate(in.layer_bytes.begin(), in.layer_bytes.end(), uint64_t(0));
  EXPECT_EQ(layers + in.head_bytes, m->weight_bytes());
  for (uint64_t b : in.layer_bytes) EXPECT_EQ(b, in.layer_bytes[0]);
  EXPECT_GT(in.head_bytes, 0u);
  EXPECT_EQ(in.fixed_bytes, 0u);
  EXPECT_EQ(in.kv_bytes_per_layer, uint64_t(KVCache::bytes_for(m->hparams(), DType::F16, 256, 1)));

  s.overrides = {"token_embd=CPU", "^blk\\.0\\.=CUDA0", "^blk\\.1\\.=CUDA1"};
  FitInput ot = fit_input(*m, s, "CUDA0");
  EXPECT_EQ(ot.fixed_bytes, in.layer_bytes[0]);  // layer 0 by hand
  EXPECT_EQ(ot.layer_bytes[0], 0u);
  EXPECT_EQ(ot.layer_bytes[1], 0u);  // another GPU's: not this fit's
  EXPECT_EQ(ot.head_bytes, in.head_bytes - m->file().find_tensor("token_embd.weight")->nbytes);
}

// A mixture of experts: the expert weights apart, per layer; --n-cpu-moe
// given by hand takes the first layers' out; --cpu-moe all of them.
TEST(GpuFit, InputFromAMixtureOfExperts) {
  const std::string path = test::synth_tiny("qwen3moe", "gpu-fit");
  const auto m = Model::load(path);
  const int64_t n_layer = m->hparams().n_layer;
  ASSERT_GT(m->hparams().n_expert, 0);
  RuntimeSpec s;
  s.n_ctx = 64;
  FitInput in = fit_input(*m, s, "CUDA0");
  ASSERT_EQ(int64_t(in.expert_bytes.size()), n_layer);
  uint64_t experts = 0, layers = 0;
  for (int64_t il = 0; il < n_layer; ++il) {
    uint64_t want = 0;
    for (const char* w : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"})
      want += m->file().find_tensor("blk." + std::to_string(il) + "." + w + ".weight")->nbytes;
    EXPECT_EQ(in.expert_bytes[size_t(il)], want) << il;
    experts += in.expert_bytes[size_t(il)];
    layers += in.layer_bytes[size_t(il)];
    EXPECT_GT(in.layer_bytes[size_t(il)], 0u);  // attention, norms, the router
  }
  EXPECT_EQ(experts + layers + in.head_bytes, m->weight_bytes());
  EXPECT_TRUE(plan_gpu_fit(in).moe);

  s.n_cpu_moe = 1;
  FitInput first = fit_input(*m, s, "CUDA0");
  EXPECT_EQ(first.expert_bytes[0], 0u);
  EXPECT_EQ(first.expert_bytes[1], in.expert_bytes[1]);
  s.n_cpu_moe = 0;
  s.cpu_moe = true;
  FitInput all = fit_input(*m, s, "CUDA0");
  for (uint64_t b : all.expert_bytes) EXPECT_EQ(b, 0u);
  EXPECT_EQ(all.layer_bytes, in.layer_bytes);
  all.free_bytes = uint64_t(1) << 40;
  EXPECT_FALSE(plan_gpu_fit(all).moe);  // nothing left for the fit to move
}

}  // namespace
}  // namespace weir
