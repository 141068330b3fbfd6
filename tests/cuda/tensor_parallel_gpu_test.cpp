// Tensor parallelism over GPUs of this host: ranks are threads, one GPU
// each, their weights loaded by the loader (rows as ranges, column blocks
// as strided items), collectives over NVLink and NCCL. Logits equal one
// GPU's within the GPU kernels' rounding; greedy tokens agree; every rank
// waits on the host once a decoded token. Skipped with fewer GPUs.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backend/registry.h"
#include "comm/gpu_comm.h"
#include "engine/session.h"
#include "model/loader.h"
#include "model/model.h"
#include "model/shard.h"
#include "model/tiny_models.h"

namespace weir {
namespace {

struct GpuGroup {
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<std::unique_ptr<Collective>> comms;
  LoadedWeights weights;
};

GpuGroup make_group(const Model& m, int n) {
  GpuGroup g;
  std::vector<int> devices;
  for (int r = 0; r < n; ++r) {
    devices.push_back(r);
    CudaOptions o;
    o.device = r;
    g.backends.push_back(make_cuda_backend(o));
  }
  g.comms = make_gpu_comms(devices);
  std::vector<LoadItem> items;
  for (int r = 0; r < n; ++r) {
    auto mine = rank_weight_items(m, {r, n, g.comms[size_t(r)].get()}, g.backends[size_t(r)].get());
    items.insert(items.end(), mine.begin(), mine.end());
  }
  LoaderOptions lo;
  lo.buffer_bytes = 6000;  // strided items cut over several reads
  g.weights = load_weights(m.file(), items, lo);
  return g;
}

struct Outcome {
  std::vector<float> logits;
  std::vector<int32_t> greedy;
  std::vector<uint64_t> waits_per_token;  // a rank each
};

Outcome run(const Model& m, std::vector<Backend*> backends, std::vector<Collective*> comms) {
  SessionParams sp;
  sp.n_ctx = 64;
  sp.n_batch = 5;
  const int n = int(backends.size());
  if (n > 1) {
    sp.tp = {0, n, comms[0]};
    for (int r = 1; r < n; ++r) sp.peers.push_back({backends[size_t(r)], comms[size_t(r)]});
  }
  Outcome out;
  {
    Session s(m, *backends[0], sp);
    const std::vector<int32_t> prompt = {1, 5, 9, 2, 7, 3, 11};
    std::vector<int32_t> rows(prompt.size());
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = int32_t(i);
    s.eval(prompt, rows);
    for (size_t t = 0; t < prompt.size(); ++t)
      out.logits.insert(out.logits.end(), s.logits(t), s.logits(t) + s.n_vocab());
  }
  Session s(m, *backends[0], sp);
  BackendSampling greedy;
  greedy.temperature = 0;
  int32_t id = s.eval_sample(std::vector<int32_t>{1, 5, 9}, greedy);
  std::vector<uint64_t> before;
  for (Backend* b : backends) before.push_back(b->stats().host_waits);
  const int steps = 8;
  for (int k = 0; k < steps; ++k) {
    out.greedy.push_back(id);
    id = s.eval_sample(std::vector<int32_t>{id}, greedy);
  }
  for (size_t r = 0; r < backends.size(); ++r)
    out.waits_per_token.push_back((backends[r]->stats().host_waits - before[r]) / steps);
  return out;
}

class CudaTensorParallel : public ::testing::TestWithParam<int> {};

TEST_P(CudaTensorParallel, TinyModelsMatchOneGpu) {
  const int n = GetParam();
  if (int(cuda_devices().size()) < n) GTEST_SKIP() << "needs " << n << " GPUs";
  for (const char* name : {"llama3", "qwen2", "gemma3", "qwen2-q8_0"}) {
    WEIR_TINY_MODEL(dir, name, "cuda-tp");
    auto model = Model::load(dir + "/" + name + ".gguf");
    try {
      check_tensor_parallel(model->hparams(), model->file().find_tensor("blk.0.attn_output.weight")->dtype,
                            model->file().find_tensor("blk.0.ffn_down.weight")->dtype, n);
    } catch (const Error& e) {
      continue;  // this model does not split n ways (said by the CPU tests)
    }
    auto one = make_cuda_backend(CudaOptions{});
    Outcome want, got;
    const char* phase = "one GPU";
    try {
      want = run(*model, {one.get()}, {});
      phase = "making the group";
      GpuGroup g = make_group(*model, n);
      std::vector<Backend*> bs;
      std::vector<Collective*> cs;
      for (int r = 0; r < n; ++r) bs.push_back(g.backends[size_t(r)].get()), cs.push_back(g.comms[size_t(r)].get());
      phase = "running the group";
      got = run(*model, bs, cs);
    } catch (const std::exception& e) {
      FAIL() << name << " --tp " << n << ", " << phase << ": " << e.what();
    }
    const int64_t V = model->hparams().n_vocab;
    for (size_t row = 0; row * size_t(V) < want.logits.size(); ++row) {
      double diff = 0, scale = 0;
      for (int64_t i = 0; i < V; ++i) {
        diff = std::max(diff, std::fabs(double(got.logits[row * size_t(V) + size_t(i)]) - want.logits[row * size_t(V) + size_t(i)]));
        scale = std::max(scale, std::fabs(double(want.logits[row * size_t(V) + size_t(i)])));
      }
      EXPECT_LT(diff / scale, 2e-2) << name << " --tp " << n << " row " << row;
    }
    size_t agree = 0;
    while (agree < want.greedy.size() && got.greedy[agree] == want.greedy[agree]) ++agree;
    EXPECT_GE(agree, 4u) << name << ": greedy tokens part after " << agree;
    for (int r = 0; r < n; ++r) EXPECT_EQ(got.waits_per_token[size_t(r)], 1u) << name << " rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, CudaTensorParallel, ::testing::Values(2, 4), [](const auto& i) {
  return std::to_string(i.param) + "gpus";
});

}  // namespace
}  // namespace weir
