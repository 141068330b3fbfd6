// The CUDA backend's launch planner (backend/cuda/plan/launch_plan.h) is host
// logic over a Graph: these tests run it without a GPU, in CI, on the
// graphs of tiny models of every architecture, and check what each fusion
// saves, that turning each off (CudaOptions) costs exactly its launches,
// and the planner's promise that no launch writes over an input from
// outside it, with memory placed as the backend places it.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <ostream>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/plan/launch_memory.h"
#include "backend/cuda/plan/launch_plan.h"
#include "core/error.h"
#include "model/model.h"
#include "model/synth.h"
#include "cuda_plan/tiny_models.h"
#include "test_env.h"

namespace weir::cuda {
namespace {

using test_models::tiny;

// A step's graph: T tokens over n_kv cells, the last token's logits.
struct Step {
  std::unique_ptr<Model> model;
  CpuBackend cpu{1};  // for the KV cache's memory
  std::unique_ptr<KVCache> kv;
  ForwardGraph fg;
  Step(const std::string& arch, FileType ft, int64_t T, DType kv_type = DType::F16) : model(tiny(arch, ft)) {
    kv = std::make_unique<KVCache>(model->hparams(), 256, kv_type, cpu);
    fg = model->build(T, 256, 1, *kv, false, TensorParallel{});
  }
  int64_t layers() const { return model->hparams().n_layer; }
};

// The plan's promise with memory placed as the backend places it (the same
// function), at an address never dereferenced.
void check_placed(const Graph& g, const LaunchPlan& p) {
  const ActivationPlan act = plan_launch_memory(g, p);
  place_activations(const_cast<Graph&>(g), act, reinterpret_cast<void*>(uintptr_t(1) << 40));
  EXPECT_NO_THROW(check_launch_memory(p));
}

// Launches of a kind.
int count(const LaunchPlan& p, LaunchKind k) {
  int n = 0;
  for (const Launch& l : p.launches) n += l.kind == k;
  return n;
}

// The launches are a partition of the nodes, in order, each holding its
// memory at least over its nodes.
void check_partition(const LaunchPlan& p) {
  size_t next = 0;
  for (const Launch& l : p.launches) {
    EXPECT_EQ(l.first, next);
    EXPECT_LT(l.first, l.end);
    EXPECT_GE(l.memory_end, l.end);
    EXPECT_LE(l.memory_end, p.nodes.size());
    next = l.end;
  }
  EXPECT_EQ(next, p.nodes.size());
}

struct Case {
  const char* arch;
  FileType ft;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.arch << " " << file_type_name(c.ft); }

class LaunchPlanTest : public ::testing::TestWithParam<Case> {};

TEST_P(LaunchPlanTest, EachFusionSavesItsLaunchesAndKeepsThePromise) {
  const Case c = GetParam();
  Step s(c.arch, c.ft, 1);
  const CudaOptions all;
  LaunchPlan p = plan_launches(*s.fg.graph, all);
  check_partition(p);
  const size_t fused = p.kernel_launches();
  std::printf("%s %s decode: %zu nodes, %zu launches (%.1f a layer)\n", c.arch, file_type_name(c.ft),
              p.nodes.size(), fused, double(fused) / double(s.layers()));
  EXPECT_LT(fused, p.nodes.size());
  check_placed(*s.fg.graph, p);
  // Each fusion off costs launches, never saves any; all off costs the
  // most, and no plan breaks its promise.
  CudaOptions none;
  none.glu_in_products = none.defer_norm = none.rope_in_products = none.tile_group = none.float_group =
      none.moe_fusions = none.rope_fusions = none.norm_chain = false;
  size_t most = 0;
  for (int k = 0; k < 7; ++k) {
    CudaOptions o;
    (k == 0   ? o.glu_in_products
     : k == 1 ? o.defer_norm
     : k == 2 ? o.rope_in_products
     : k == 3 ? o.float_group
     : k == 4 ? o.moe_fusions
     : k == 5 ? o.rope_fusions
              : o.norm_chain) = false;
    LaunchPlan q = plan_launches(*s.fg.graph, o);
    EXPECT_GE(q.kernel_launches(), fused) << "knob " << k;
    most = std::max(most, q.kernel_launches());
    check_partition(q);
    check_placed(*s.fg.graph, q);
  }
  LaunchPlan q = plan_launches(*s.fg.graph, none);
  EXPECT_GE(q.kernel_launches(), most);
  check_placed(*s.fg.graph, q);
}

INSTANTIATE_TEST_SUITE_P(Archs, LaunchPlanTest,
                         ::testing::Values(Case{"llama", FileType::Q4_K_M}, Case{"llama", FileType::Q8_0},
                                           Case{"llama", FileType::MOSTLY_F16}, Case{"qwen2", FileType::Q4_0},
                                           Case{"qwen3", FileType::Q4_K_M}, Case{"gemma3", FileType::Q8_0},
                                           Case{"qwen3moe", FileType::Q4_K_M}, Case{"qwen3moe", FileType::Q8_0}),
                         [](const auto& info) {
                           std::string n = std::string(info.param.arch) + "_" + file_type_name(info.param.ft);
                           for (char& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// The decode plan of an 8-bit model, launch by launch, as the perf notes
// describe a layer: q/k/v in one launch that ropes and writes the cache
// itself, attention, the o product with the residual add and norm after it,
// gate/up with the GLU, down with the next residual add and norm.
// The same with an 8-bit KV cache (-ctk q8_0): the q/k/v launch writes its
// blocks (32 rows together: ops_mul_mat_q8.cu).
TEST(LaunchPlan, ALlamaQ8LayerInFiveLaunches) {  // (2 layers)
  for (DType kv : {DType::F16, DType::Q8_0}) {
    SCOPED_TRACE(dtype_name(kv));
    Step s("llama", FileType::Q8_0, 1, kv);
    LaunchPlan p = plan_launches(*s.fg.graph, CudaOptions{});
    std::map<std::string, int> kinds;
    for (const Launch& l : p.launches)
      if (l.kind != LaunchKind::InOtherLaunch) ++kinds[p.label(l)];
    for (const auto& [k, n] : kinds) std::printf("%3d x %s\n", n, k.c_str());
    // Per layer: 5; besides: the embedding lookup, the first norm, the
    // output rows' lookups, the last norm, the output product.
    EXPECT_EQ(p.kernel_launches(), size_t(5 * s.layers() + 6));
    int grouped = 0, jobs = 0, deferred = 0;
    for (const Launch& l : p.launches) {
      grouped += l.products == 3;
      jobs += l.kind == LaunchKind::Products && !l.jobs.empty();
      deferred += l.x_from == ActivationSource::DeferredNorm;
    }
    EXPECT_EQ(grouped, s.layers()) << "q/k/v in one launch";
    EXPECT_EQ(count(p, LaunchKind::ProductsGlu), s.layers()) << "the GLU in the gate/up launch";
    EXPECT_EQ(jobs, s.layers()) << "rope and cache writes run by the q/k/v launch";
    EXPECT_GE(count(p, LaunchKind::ProductAddNorm), s.layers()) << "residual norms run in the products before";
    EXPECT_GE(deferred, s.layers()) << "products after a deferred norm";
    EXPECT_EQ(count(p, LaunchKind::RopeStore), 0) << "no rope/store launch of its own";
  }
}

// qwen2's q/k/v products come one after the other, their biases after them
// (the model builds them so): one launch for the three, as llama's; the
// biases are added by the rope launch's jobs (q, k and v: no add launch),
// three launches a layer more with CudaOptions::rope_fusions off.
TEST(LaunchPlan, Qwen2QkvProductsInOneLaunch) {
  for (int64_t T : {1, 16}) {
    Step s("qwen2", FileType::Q4_0, T);
    LaunchPlan p = plan_launches(*s.fg.graph, CudaOptions{});
    int grouped = 0, biases = 0;
    for (const Launch& l : p.launches) {
      grouped += l.products == 3;
      for (const RopeStoreNode& j : l.jobs) biases += j.bias != nullptr;
    }
    if (T == 1) {
      EXPECT_EQ(grouped, s.layers());
    }
    EXPECT_EQ(biases, 3 * s.layers()) << "T " << T;
    check_placed(*s.fg.graph, p);
    CudaOptions off;
    off.rope_fusions = false;
    EXPECT_EQ(plan_launches(*s.fg.graph, off).kernel_launches(), p.kernel_launches() + size_t(3 * s.layers()))
        << "T " << T;
  }
}

// qwen3's and gemma3's q and k norms run in the rope launch (two launches
// fewer a layer), and gemma3's q scale too (with the v cache write then in
// the same launch: four fewer); decode and prefill, and the promise kept.
TEST(LaunchPlan, QkNormsInTheRopeLaunch) {
  for (const char* arch : {"qwen3", "qwen3moe", "gemma3"})
    for (int64_t T : {1, 16}) {
      Step s(arch, FileType::Q4_K_M, T);
      LaunchPlan p = plan_launches(*s.fg.graph, CudaOptions{});
      const bool gemma = std::string(arch) == "gemma3";
      int normed = 0, scaled = 0;
      for (const Launch& l : p.launches)
        for (const RopeStoreNode& j : l.jobs) normed += j.norm != nullptr, scaled += j.scale != nullptr;
      EXPECT_EQ(normed, 2 * s.layers()) << arch << " T " << T;
      EXPECT_EQ(scaled, gemma ? s.layers() : 0) << arch << " T " << T;
      check_placed(*s.fg.graph, p);
      CudaOptions off;
      off.rope_fusions = false;
      EXPECT_EQ(plan_launches(*s.fg.graph, off).kernel_launches(),
                p.kernel_launches() + size_t((gemma ? 4 : 2) * s.layers()))
          << arch << " T " << T;
    }
}

// gemma3's post-attention and post-FFN norms run with the residual add and
// the next norm: two launches fewer a layer, the promise kept.
TEST(LaunchPlan, Gemma3NormChains) {
  for (int64_t T : {1, 16}) {
    Step s("gemma3", FileType::Q4_K_M, T);
    LaunchPlan p = plan_launches(*s.fg.graph, CudaOptions{});
    EXPECT_EQ(count(p, LaunchKind::NormAddNorm), 2 * s.layers()) << "T " << T;
    check_placed(*s.fg.graph, p);
    CudaOptions off;
    off.norm_chain = false;
    EXPECT_EQ(plan_launches(*s.fg.graph, off).kernel_launches(), p.kernel_launches() + size_t(2 * s.layers()))
        << "T " << T;
  }
}

// A mixture-of-experts layer: the routing in one launch, gate/up with the
// GLU handing 8-bit blocks to down, and for decode down with the weighted
// sum; the promise kept, decode and prefill.
TEST(LaunchPlan, ExpertLaunchesOfAQwen3MoeLayer) {
  for (int64_t T : {1, 40}) {
    Step s("qwen3moe", FileType::Q4_K_M, T);
    LaunchPlan p = plan_launches(*s.fg.graph, CudaOptions{});
    EXPECT_EQ(count(p, LaunchKind::Route), s.layers()) << "T " << T;
    // Prefill: 120 pairs take the MMA tiles, gate and up apart (the GLU
    // fused only into the 8-bit kernels), down apart; but for the last
    // layer's FFN, which runs on the one token whose logits are asked for.
    const int fused = T == 1 ? int(s.layers()) : 1;
    EXPECT_EQ(count(p, LaunchKind::ExpertsGlu), fused) << "T " << T;
    EXPECT_EQ(count(p, LaunchKind::ExpertsDownSum), fused) << "T " << T;
    int from_glu = 0, shared = 0;
    for (const Launch& l : p.launches) {
      from_glu += l.x_from == ActivationSource::GluQ8 && p.nodes[l.first]->op == Op::MulMatId;
      shared += l.kind == LaunchKind::ExpertsGlu && l.x_from == ActivationSource::Q8InScratch;
    }
    EXPECT_EQ(from_glu, fused) << "down reads the GLU's 8-bit blocks";
    EXPECT_EQ(shared, fused) << "the FFN norm's launch writes gate/up's 8-bit x";
    check_placed(*s.fg.graph, p);
    CudaOptions off;
    off.moe_fusions = false;
    EXPECT_EQ(plan_launches(*s.fg.graph, off).kernel_launches(), p.kernel_launches() + size_t(s.layers() + 3 * fused));
  }
}

// Prefill (the tile kernels, cuBLAS): fewer launches than nodes, and the
// promise kept.
TEST(LaunchPlan, PrefillPlansKeepThePromise) {
  for (int64_t T : {9, 64, 200}) {
    Step s("llama", FileType::Q4_K_M, T);
    LaunchPlan p = plan_launches(*s.fg.graph, CudaOptions{});
    EXPECT_LT(p.kernel_launches(), p.nodes.size()) << "T " << T;
    check_partition(p);
    check_placed(*s.fg.graph, p);
  }
}

}  // namespace
}  // namespace weir::cuda
