// Whole models on the GPU against the CPU backend (as users run it, with
// llama.cpp's activation rounding): the prompt's last logits agree (same
// top-1 unless the CPU's top two are within 0.1, KL < 0.03 nats over the
// CPU's 50 most likely tokens), greedy decoding on the GPU (its sample op,
// one host wait per token) follows the CPU's tokens for 32 steps except
// after a near-tie, and the prompt runs in batches through the tensor-core
// path. Models: a tiny random one per architecture (written here), the real
// Gemma 3 270M when present, and any listed in WEIR_GPU_COMPARE_MODELS
// (colon-separated paths; scripts/gpu-check.sh writes big ones with
// weir synth).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <tuple>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/registry.h"
#include "core/gguf.h"
#include "cuda_test_util.h"
#include "engine/session.h"
#include "model/shard.h"
#include "model/loader.h"
#include "comm/gpu_comm.h"
#include "sched/scheduler.h"
#include "model/gemma3_reference.h"
#include "model/model.h"
#include "model/placement.h"
#include "model/synth.h"
#include "logit_compare.h"
#include "test_env.h"

namespace weir {
namespace {

using test::kl_top50;
using test::Margin;
using test::top_two;

// The backend under test for a model: the whole model on the GPU, or a
// placement over the CPU and the GPU; waits_per_token: the host waits one
// decoded token must take (1 on one device; 1 + the device-to-host
// boundaries of a split).
struct UnderTest {
  std::unique_ptr<Backend> backend;
  uint64_t waits_per_token = 1;
  bool one_device = true;  // the prompt's waits: one per batch
  // Tensor parallelism: puts the session in the group (backend is rank 0's);
  // `keep` holds the group's other backends, comms and loaded weights.
  std::function<void(SessionParams&)> join;
  std::shared_ptr<void> keep;
};
using MakeBackend = std::function<UnderTest(const Model&)>;

UnderTest whole_gpu(const Model&) { return {make_cuda_backend(CudaOptions{}), 1, true}; }
// With the decode products staged through shared memory everywhere they
// can (1), or never (0): the kernels the defaults take only for some shapes.
MakeBackend whole_gpu_staged(int staged) {
  return [=](const Model&) {
    CudaOptions o;
    o.staged = staged;
    return UnderTest{make_cuda_backend(o), 1, true};
  };
}

// The last n_gpu_layers on the GPU (llama.cpp's -ngl), the rest and the head
// on the CPU, or as overrides say (-ot).
MakeBackend split(int n_gpu_layers, std::vector<std::string> overrides = {}, bool op_offload = false) {
  return [=](const Model& m) {
    PlacementRequest r;
    r.n_gpu_layers = n_gpu_layers;
    for (const std::string& o : overrides) r.overrides.push_back(parse_tensor_override(o));
    const ModelPlacement p = place_model(m, {"CPU", "CUDA0"}, r);
    auto cpu = std::make_unique<CpuBackend>(int(std::max(2u, std::thread::hardware_concurrency())));
    auto gpu = make_cuda_backend(CudaOptions{});
    sched::SchedOptions so;
    so.offload_backend = op_offload ? 1 : -1;
    auto s = std::make_unique<sched::Scheduler>(std::vector<Backend*>{cpu.get(), gpu.get()}, p.for_scheduler(m), so);
    s->own(std::move(cpu));
    s->own(std::move(gpu));
    // One step's waits: 1, plus one for each place the CPU reads the GPU's result.
    KVCache kv(m.hparams(), 64, DType::F16, *s);
    ForwardGraph fg = m.build(1, 64, 1, kv, false, TensorParallel{});
    Graph& g = *fg.graph;
    Tensor* params = g.input(DType::F32, {5, 1}, "sample_params");
    g.mark_output(g.sample(fg.logits, params));
    for (Tensor* t : {fg.tokens, fg.pos, fg.kv_cells, fg.out_rows, fg.mask, fg.mask_swa, params})
      if (t) t->data = nullptr;
    std::unique_ptr<Buffer> in = s->alloc(1 << 20);
    size_t off = 0;
    for (Tensor* t : {fg.tokens, fg.pos, fg.kv_cells, fg.out_rows, fg.mask, fg.mask_swa, params})
      if (t) t->data = static_cast<char*>(in->data()) + off, off += (t->n_bytes() + 63) / 64 * 64;
    s->plan(g);
    const uint64_t waits = 1 + uint64_t(s->split_of(g)->host_waits());
    std::printf("%s: %s; %llu host waits a token\n", p.summary().c_str(), s->name().c_str(),
                (unsigned long long)waits);
    s->release(g);
    return UnderTest{std::move(s), waits, false};
  };
}

// --tp n over GPUs 0 .. n-1: each rank's share loaded by the loader.
MakeBackend tensor_parallel(int n) {
  return [=](const Model& m) {
    struct Group {
      std::vector<std::unique_ptr<Backend>> backends;
      std::vector<std::unique_ptr<Collective>> comms;
      LoadedWeights weights;
      ~Group() { weights = LoadedWeights(); }
    };
    auto g = std::make_shared<Group>();
    std::vector<int> devices;
    for (int r = 0; r < n; ++r) {
      devices.push_back(r);
      CudaOptions o;
      o.device = r;
      g->backends.push_back(make_cuda_backend(o));
    }
    g->comms = make_gpu_comms(devices);
    std::vector<LoadItem> items;
    for (int r = 0; r < n; ++r) {
      auto mine = rank_weight_items(m, {r, n, g->comms[size_t(r)].get()}, g->backends[size_t(r)].get());
      items.insert(items.end(), mine.begin(), mine.end());
    }
    g->weights = load_weights(m.file(), items);
    UnderTest u;
    u.backend = std::move(g->backends[0]);
    u.join = [g, n](SessionParams& sp) {
      sp.tp = {0, n, g->comms[0].get()};
      sp.peers.clear();
      for (int r = 1; r < n; ++r) sp.peers.push_back({g->backends[size_t(r)].get(), g->comms[size_t(r)].get()});
    };
    u.keep = g;
    std::printf("tensor parallel over %d GPUs (%s)\n", n, g->comms[0]->kind().c_str());
    return u;
  };
}

void compare_model(const std::string& path, int n_prompt, int n_steps = 32, const MakeBackend& make = whole_gpu,
                   DType kv_type = DType::F16) {
  SCOPED_TRACE(path + " (" + dtype_name(kv_type) + " cache)");
  auto model = Model::load(path);
  const int64_t V = model->hparams().n_vocab;
  CpuBackend cpu(int(std::max(2u, std::thread::hardware_concurrency())));
  UnderTest under = make(*model);
  Backend* gpu = under.backend.get();
  SessionParams sp;
  sp.n_ctx = n_prompt + n_steps + 8;
  sp.n_batch = 64;  // several batches through the prefill path
  sp.kv_type = kv_type;
  SessionParams gp = sp;
  if (under.join) under.join(gp);
  Session sc(*model, cpu, sp), sg(*model, *gpu, gp);

  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(V - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
  for (int32_t& t : prompt) t = tok(rng);
  sc.eval(prompt);
  sg.eval(prompt);
  {
    const Margin mc = top_two(sc.logits(), V), mg = top_two(sg.logits(), V);
    if (mc.top1 != mg.top1) {
      EXPECT_LT(mc.margin, 0.1f) << "prompt top-1 differs: cpu " << mc.top1 << " gpu " << mg.top1;
    }
    const double kl = kl_top50(sc.logits(), sg.logits(), V);
    std::printf("%s: prompt logits KL(cpu || gpu) on the CPU's top-50 %.5f nats\n", path.c_str(), kl);
    EXPECT_LT(kl, 0.03);
  }
  // Greedy: the GPU samples (one wait per token); the CPU takes the argmax.
  BackendSampling greedy;
  greedy.temperature = 0;
  sg.reset();
  sc.reset();
  sc.eval(prompt);
  const uint64_t waits0 = gpu->stats().host_waits;
  int32_t g_next = sg.eval_sample(prompt, greedy);
  const uint64_t waits_prompt = gpu->stats().host_waits - waits0;
  if (under.one_device) EXPECT_EQ(waits_prompt, uint64_t((n_prompt + sp.n_batch - 1) / sp.n_batch));
  int agreed = 0;
  for (int s = 0; s < n_steps; ++s) {
    const Margin mc = top_two(sc.logits(), V);
    if (mc.top1 != g_next) {
      EXPECT_LT(mc.margin, 0.1f) << "step " << s << ": cpu " << mc.top1 << " gpu " << g_next;
      break;  // the sequences part here
    }
    ++agreed;
    const int32_t step[1] = {g_next};
    const uint64_t w = gpu->stats().host_waits;
    g_next = sg.eval_sample(step, greedy);
    EXPECT_EQ(gpu->stats().host_waits - w, under.waits_per_token) << "host waits for one generated token";
    sc.eval(step);
  }
  std::printf("%s: %d of %d greedy tokens agree; graphs captured %llu, replayed %llu\n", path.c_str(), agreed, n_steps,
              (unsigned long long)gpu->stats().graphs_captured, (unsigned long long)gpu->stats().graphs_replayed);
  // Decode on the GPU replays its recorded graphs (with op offload alone,
  // decode runs on the CPU).
  if (under.one_device || under.waits_per_token > 1) EXPECT_GT(gpu->stats().graphs_replayed, 0u);
}

std::string tiny(const std::string& arch, FileType ft) {
  const std::string dir = test::own_dir();
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/gpu-tiny-" + arch + "-" + file_type_name(ft) + ".gguf";
  if (!std::filesystem::exists(path)) {
    SynthOptions o;
    o.file_type = ft;
    o.seed = 3;
    o.sync = false;
    write_synth_model(find_synth_preset(arch, "tiny"), o, path);
  }
  return path;
}

// Partial offload (the scheduler over the CPU and the GPU): the last layer,
// all but the first, the first alone (-ot), FFNs on the CPU and attention on
// the GPU (-ot "ffn_.*=CPU"), all on the CPU with the prompt's products on
// the GPU (op offload; the prompt's batches of 64 take it): the CPU's
// tokens, as the whole GPU gives them.
TEST(CudaModel, PartialOffloadOfEveryArchitecture) {
  WEIR_REQUIRE_GPU();
  for (const auto& [arch, ft, n_prompt] : {std::tuple{"llama", FileType::Q4_K_M, 40}, {"qwen2", FileType::Q8_0, 40},
                                          {"qwen3", FileType::Q4_0, 40}, {"gemma3", FileType::Q4_K_M, 150}}) {
    const std::string path = tiny(arch, ft);
    const int64_t n_layer = Model::load(path)->hparams().n_layer;
    compare_model(path, n_prompt, 16, split(1));
    compare_model(path, n_prompt, 16, split(int(n_layer) - 1, {}, true));
    compare_model(path, n_prompt, 16, split(0, {"blk\\.0\\.=CUDA0"}));
    compare_model(path, n_prompt, 16, split(99, {"ffn_.*=CPU"}, true));
    compare_model(path, n_prompt, 16, split(0, {}, true));  // all weights on the CPU, prefill on the GPU
  }
}

TEST(CudaModel, TinyModelsOfEveryArchitecture) {
  WEIR_REQUIRE_GPU();
  compare_model(tiny("llama", FileType::Q4_K_M), 40);
  compare_model(tiny("qwen2", FileType::Q8_0), 40);
  compare_model(tiny("qwen3", FileType::Q4_0), 40);
  // Past its 128-token window.
  compare_model(tiny("gemma3", FileType::Q4_K_M), 150);
  // Soft-capped scores and logits, every other layer past its 128-token window.
  compare_model(tiny("gemma2", FileType::Q4_K_M), 150);
  // gpt-oss: MXFP4 experts with biases, sinks, every other layer past its
  // 8-token window, YaRN.
  compare_model(tiny("gpt-oss", FileType::MXFP4_MOE), 40);
  compare_model(tiny("llama", FileType::MOSTLY_F16), 20);
  for (int staged : {1, 0}) {
    compare_model(tiny("llama", FileType::Q4_K_M), 40, 32, whole_gpu_staged(staged));
    compare_model(tiny("qwen3", FileType::Q4_0), 40, 32, whole_gpu_staged(staged));
  }
}

// The 8-bit KV cache (-ctk q8_0) on both: the ropes' and set_rows' blocks
// written by the GPU's launches, read by its attention kernels (prefill,
// decode past the 128-token window), against the CPU's.
TEST(CudaModel, TinyModelsWithAn8BitCache) {
  WEIR_REQUIRE_GPU();
  compare_model(tiny("llama", FileType::Q4_K_M), 40, 32, whole_gpu, DType::Q8_0);
  compare_model(tiny("qwen2", FileType::Q8_0), 40, 32, whole_gpu, DType::Q8_0);
  compare_model(tiny("qwen3", FileType::Q4_0), 40, 32, whole_gpu, DType::Q8_0);
  compare_model(tiny("gemma3", FileType::Q4_K_M), 150, 32, whole_gpu, DType::Q8_0);
  compare_model(tiny("llama", FileType::MOSTLY_F16), 20, 32, whole_gpu, DType::Q8_0);
}

// Batched decode on the GPU: S sequences of different prompt lengths, one
// token each per step (one host wait per step), generate greedily what
// each generates alone on the GPU. 12 sequences of the F16 model take
// cuBLAS (more than 8 tokens), 4 the integer decode kernels. (Quantized
// weights at 12 take the tile kernel on fp16 activations where each alone
// takes 8-bit ones: on a tiny random model that flips near-ties, so the
// tile kernels are checked op by op against the CPU in backend_ops_test.)
// Each sequence alone takes its prompt as the batch does: a prefill of all
// but the last token, then the last one decoded, so both run the same
// kernels on the prompt.
void batched_matches_alone(const std::string& path, int n_seq) {
  SCOPED_TRACE(path + " x" + std::to_string(n_seq));
  auto model = Model::load(path);
  auto gpu = make_cuda_backend(CudaOptions{});
  const int steps = 8;
  BackendSampling greedy;
  greedy.temperature = 0;
  std::mt19937 rng(9);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(model->hparams().n_vocab - 1));
  std::vector<std::vector<int32_t>> prompts, want;
  for (int i = 0; i < n_seq; ++i) {
    std::vector<int32_t> p(static_cast<size_t>(2 + (5 * i) % 11), 0);
    for (int32_t& t : p) t = tok(rng);
    prompts.push_back(p);
    SessionParams sp;
    sp.n_ctx = 64;
    sp.kv_type = DType::F16;
    Session alone(*model, *gpu, sp);
    // The prompt as the batch takes it: all but the last token as a
    // prefill, the last one through the decode kernels.
    alone.eval(std::vector<int32_t>(p.begin(), p.end() - 1));
    const int32_t first[1] = {p.back()};
    std::vector<int32_t> w = {alone.eval_sample(first, greedy)};
    for (int k = 1; k < steps; ++k) {
      const int32_t t[1] = {w.back()};
      w.push_back(alone.eval_sample(t, greedy));
    }
    want.push_back(w);
  }
  SessionParams sp;
  sp.n_ctx = 64 * n_seq;
  sp.n_seq = n_seq;  // a region each: attention takes each token apart
  sp.kv_type = DType::F16;
  Session s(*model, *gpu, sp);
  std::vector<int32_t> seqs, last;
  for (int i = 0; i < n_seq; ++i) {
    const std::vector<int32_t> head(prompts[size_t(i)].begin(), prompts[size_t(i)].end() - 1);
    if (i == 0)
      s.eval(head);
    else
      s.fill(i, head);
    seqs.push_back(i);
    last.push_back(prompts[size_t(i)].back());
  }
  for (int k = 0; k < steps; ++k) {
    const uint64_t w0 = gpu->stats().host_waits;
    last = s.decode_sample(last, seqs, greedy);
    EXPECT_EQ(gpu->stats().host_waits - w0, 1u) << "host waits for one batched step";
    for (int i = 0; i < n_seq; ++i)
      EXPECT_EQ(last[size_t(i)], want[size_t(i)][size_t(k)]) << "sequence " << i << " step " << k;
  }
}

TEST(CudaModel, BatchedDecodeMatchesEachSequenceAlone) {
  WEIR_REQUIRE_GPU();
  batched_matches_alone(tiny("llama", FileType::Q4_K_M), 4);
  batched_matches_alone(tiny("gemma3", FileType::Q4_K_M), 4);
  batched_matches_alone(tiny("llama", FileType::MOSTLY_F16), 12);
}

// Pipelined generation on the GPU (Session::queue_sample_next): the step
// for each token is queued, its token copied on the device, before the host
// waits for the token before it, so the host's staging memory, the id slots
// and the graph's inputs are in use by one step while the next is queued.
// It must generate what eval_sample() step by step generates (sampled with
// a seed, and greedy), one host wait a token, past the 256-cell span where
// the steps change graphs; cancelled, the session goes on as stepwise.
void pipelined_matches_stepwise(const std::string& path) {
  SCOPED_TRACE(path);
  auto model = Model::load(path);
  auto gpu = make_cuda_backend(CudaOptions{});
  std::mt19937 rng(17);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(model->hparams().n_vocab - 1));
  std::vector<int32_t> prompt(6);
  for (int32_t& t : prompt) t = tok(rng);
  const int n = 300;
  SessionParams sp;
  sp.n_ctx = 512;
  for (float temp : {0.9f, 0.0f}) {
    BackendSampling bs;
    bs.temperature = temp;
    bs.seed = 7;
    Session a(*model, *gpu, sp), b(*model, *gpu, sp);
    std::vector<int32_t> want = {a.eval_sample(prompt, bs)};
    while (int(want.size()) < n) {
      const int32_t t[1] = {want.back()};
      want.push_back(a.eval_sample(t, bs));
    }
    const uint64_t w0 = gpu->stats().host_waits;
    std::vector<int32_t> got = {b.eval_sample(prompt, bs)};
    b.queue_sample_next(bs);
    while (int(got.size()) < n) {
      if (int(got.size()) + 1 < n) b.queue_sample_next(bs);
      got.push_back(b.take_sampled());
    }
    EXPECT_EQ(gpu->stats().host_waits - w0, uint64_t(n)) << "one host wait a token, temperature " << temp;
    EXPECT_EQ(got, want) << "temperature " << temp;
    // Two steps queued past the last token, cancelled: stepwise from there.
    b.queue_sample_next(bs);
    b.queue_sample_next(bs);
    b.cancel_queued();
    EXPECT_EQ(b.n_past(), a.n_past());
    const int32_t t[1] = {want.back()};
    EXPECT_EQ(b.eval_sample(t, bs), a.eval_sample(t, bs)) << "after a cancel, temperature " << temp;
  }
}

TEST(CudaModel, PipelinedMatchesStepwise) {
  WEIR_REQUIRE_GPU();
  pipelined_matches_stepwise(tiny("llama", FileType::Q4_K_M));
  pipelined_matches_stepwise(tiny("gemma3", FileType::Q4_K_M));
}

TEST(CudaModel, RealGemma3) {
  WEIR_REQUIRE_GPU();
  WEIR_REQUIRE_MODEL(path);
  compare_model(path, 100);
}

// The real model split as `weir run -ngl 10` splits it: layers 8-17 on the GPU.
TEST(CudaModel, RealGemma3PartialOffload) {
  WEIR_REQUIRE_GPU();
  WEIR_REQUIRE_MODEL(path);
  compare_model(path, 100, 32, split(10));
}

// The real model on the GPU against llama.cpp's reference logits and greedy
// tokens (the checks the CPU passes in tests/model/gemma3_reference_test.cpp),
// and against the float64 forward pass: no farther from it than the CPU's
// rounded path is held to.
TEST(CudaModel, RealGemma3MatchesLlamaCpp) {
  WEIR_REQUIRE_GPU();
  WEIR_REQUIRE_MODEL(path);
  auto model = Model::load(path);
  auto gpu = make_cuda_backend(CudaOptions{});
  test::gemma3::expect_logits_match(*model, *gpu);
  test::gemma3::expect_greedy_matches(*model, *gpu);
  const auto g = test::gemma3::distance_to_float64(*model, *gpu, "gpu");
  EXPECT_LT(g.max_kl, 0.01);
}

// The same inputs give the same logits, bit for bit: prefill in batches and
// decode steps, run twice on one backend.
void expect_repeats(const std::string& path, int n_prompt) {
  SCOPED_TRACE(path);
  auto model = Model::load(path);
  auto gpu = make_cuda_backend(CudaOptions{});
  const int64_t V = model->hparams().n_vocab;
  SessionParams sp;
  sp.n_ctx = n_prompt + 16;
  sp.n_batch = 64;
  sp.kv_type = DType::F16;
  Session s(*model, *gpu, sp);
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(V - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
  for (int32_t& t : prompt) t = tok(rng);
  auto run = [&] {
    std::vector<float> out;
    s.reset();
    s.eval(prompt);
    out.insert(out.end(), s.logits(), s.logits() + V);
    for (int k = 0; k < 4; ++k) {
      const int32_t t[1] = {prompt[size_t(k)]};
      s.eval(t);
      out.insert(out.end(), s.logits(), s.logits() + V);
    }
    return out;
  };
  const auto a = run(), b = run(), c = run();
  // Each later run against the first: a difference only in the first pair
  // points at something the first run alone does (uploads, allocations).
  for (const auto* other : {&b, &c}) {
    ASSERT_EQ(a.size(), other->size());
    size_t differ = 0, first = a.size();
    float worst = 0;
    for (size_t i = 0; i < a.size(); ++i)
      if (std::memcmp(&a[i], &(*other)[i], sizeof(float)) != 0) {
        ++differ;
        first = std::min(first, i);
        worst = std::max(worst, std::fabs(a[i] - (*other)[i]));
      }
    EXPECT_EQ(differ, 0u) << "logits of run " << (other == &b ? 2 : 3)
                          << " differ from the first run's (largest difference " << worst << "; first in the logits of "
                          << (first < size_t(V) ? "the prompt" : "a decode step") << ")";
  }
  size_t d23 = 0;
  for (size_t i = 0; i < b.size(); ++i) d23 += std::memcmp(&b[i], &c[i], sizeof(float)) != 0;
  EXPECT_EQ(d23, 0u) << "logits of runs 2 and 3 differ";
}

TEST(CudaModel, RepeatsBitForBit) {
  WEIR_REQUIRE_GPU();
  expect_repeats(tiny("llama", FileType::Q4_K_M), 100);
  expect_repeats(tiny("gemma3", FileType::Q4_K_M), 150);
  if (const std::string real = test::model_path(); std::filesystem::exists(real)) expect_repeats(real, 100);
}

TEST(CudaModel, ListedModels) {
  WEIR_REQUIRE_GPU();
  const char* list = std::getenv("WEIR_GPU_COMPARE_MODELS");
  if (!list || !*list) GTEST_SKIP() << "WEIR_GPU_COMPARE_MODELS is not set";
  std::stringstream ss(list);
  for (std::string p; std::getline(ss, p, ':');)
    if (!p.empty()) {
      compare_model(p, 24);
      expect_repeats(p, 80);
      // And over N GPUs, tensor parallel (WEIR_GPU_COMPARE_TP=N).
      if (const char* n = std::getenv("WEIR_GPU_COMPARE_TP"); n && *n) compare_model(p, 24, 32, tensor_parallel(std::atoi(n)));
      // And split as -ngl N splits it (WEIR_GPU_COMPARE_SPLIT=N).
      if (const char* n = std::getenv("WEIR_GPU_COMPARE_SPLIT"); n && *n) {
        compare_model(p, 80, 32, split(std::atoi(n), {}, true));
        compare_model(p, 80, 32, split(0, {}, true));  // -ngl 0 with op offload
      }
    }
}

}  // namespace
}  // namespace weir
