// The scheduler over the CPU and the chaos backend (tests/chaos): a model
// split between them must compute what the CPU alone computes, bit for bit,
// for every architecture, placement and seed, in prefill, decode and
// batched decode; the host waits once per step plus once per device-to-host
// boundary; and leaving out one wait on purpose must be caught.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "chaos/chaos_backend.h"
#include "engine/session.h"
#include "model/model.h"
#include "model/placement.h"
#include "model/synth.h"
#include "sched/scheduler.h"
#include "test_env.h"

namespace weir {
namespace {

constexpr int kThreads = 2;

std::unique_ptr<Model> tiny(const std::string& arch) {
  const std::string path = test::own_dir() + "/" + arch + ".gguf";
  SynthOptions o;
  o.threads = 2;
  o.sync = false;
  o.seed = 7;
  write_synth_model(find_synth_preset(arch, "tiny"), o, path);
  return Model::load(path);
}

// A placement of the model over CPU (0) and TEST0 (1): each layer on a
// random side, the output head on `out`.
ModelPlacement random_placement(const Model& m, uint64_t seed, int out) {
  std::mt19937_64 rng(seed);
  PlacementRequest r;
  for (int64_t il = 0; il < m.hparams().n_layer; ++il)
    if (rng() & 1) r.overrides.push_back(parse_tensor_override("blk\\." + std::to_string(il) + "\\.=TEST0"));
  if (out == 1) r.overrides.push_back(parse_tensor_override("^output=TEST0"));
  return place_model(m, {"CPU", "TEST0"}, r);
}

struct Split {
  std::unique_ptr<Backend> cpu, chaos;
  std::unique_ptr<sched::Scheduler> sched;
};

Split make_split(const Model& m, const ModelPlacement& p, uint64_t seed, int skip_wait = -1, bool offload = false) {
  Split s;
  s.cpu = std::make_unique<CpuBackend>(kThreads);
  test::ChaosOptions co;
  co.seed = seed;
  co.threads = kThreads;
  s.chaos = test::make_chaos_backend(co);
  sched::SchedOptions so;
  so.skip_wait = skip_wait;
  if (offload) {  // the prompt's batches of 16 take it
    so.offload_backend = 1;
    so.offload_min_batch = 8;
  }
  s.sched = std::make_unique<sched::Scheduler>(std::vector<Backend*>{s.cpu.get(), s.chaos.get()}, p.for_scheduler(m),
                                               so);
  return s;
}

std::vector<int32_t> tokens(const Model& m, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(rng() % uint64_t(m.hparams().n_vocab));
  return t;
}

SessionParams params() {
  SessionParams p;
  p.n_ctx = 256;
  p.n_batch = 16;  // a 40-token prompt: three batches
  return p;
}

// Logits of a prompt and of each of n_decode steps after it.
std::vector<std::vector<float>> run(const Model& m, Backend& b, const std::vector<int32_t>& prompt, int n_decode) {
  Session s(m, b, params());
  std::vector<std::vector<float>> out;
  s.eval(prompt);
  out.emplace_back(s.logits(), s.logits() + s.n_vocab());
  for (int i = 0; i < n_decode; ++i) {
    const int32_t t[1] = {int32_t((prompt[size_t(i)] + 7 * i) % int32_t(m.hparams().n_vocab))};
    s.eval(t);
    out.emplace_back(s.logits(), s.logits() + s.n_vocab());
  }
  return out;
}

class SchedulerChaos : public ::testing::TestWithParam<std::string> {};

// Every placement of several random ones, prefill and decode, bit for bit.
TEST_P(SchedulerChaos, SplitEqualsTheCpuAloneBitForBit) {
  const auto m = tiny(GetParam());
  const auto prompt = tokens(*m, 40, 3);
  CpuBackend cpu(kThreads);
  const auto want = run(*m, cpu, prompt, 6);
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const ModelPlacement p = random_placement(*m, seed, int(seed % 2));
    SCOPED_TRACE("seed " + std::to_string(seed) + ": " + p.summary());
    Split s = make_split(*m, p, seed);
    const auto got = run(*m, *s.sched, prompt, 6);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "step " << i;
  }
}

// Several sequences decoded side by side (one step: a token each), and the
// tokens sampled on the chaos device.
TEST_P(SchedulerChaos, BatchedDecodeEqualsTheCpuAlone) {
  const auto m = tiny(GetParam());
  SessionParams sp = params();
  sp.n_seq = 3;
  BackendSampling greedy;
  greedy.temperature = 0;
  auto decode = [&](Backend& b) {
    Session s(*m, b, sp);
    for (int seq = 1; seq < 3; ++seq) s.fill(seq, tokens(*m, 12 + seq, uint64_t(seq)));
    std::vector<int32_t> t = {5, 9}, seqs = {1, 2}, out;
    for (int step = 0; step < 5; ++step) {
      t = s.decode_sample(t, seqs, greedy);
      out.insert(out.end(), t.begin(), t.end());
    }
    return out;
  };
  CpuBackend cpu(kThreads);
  const auto want = decode(cpu);
  for (uint64_t seed = 11; seed <= 13; ++seed) {
    Split s = make_split(*m, random_placement(*m, seed, 1), seed);
    EXPECT_EQ(decode(*s.sched), want) << "seed " << seed;
  }
}

// Op offload: the prompt's products of the CPU's weights, and its attention
// over the CPU's cache, run on the device with the weights streamed through
// slots and the cache's window copied; decode stays on the CPU.
TEST_P(SchedulerChaos, OpOffloadEqualsTheCpuAloneBitForBit) {
  const auto m = tiny(GetParam());
  const auto prompt = tokens(*m, 40, 3);
  CpuBackend cpu(kThreads);
  const auto want = run(*m, cpu, prompt, 4);
  for (uint64_t seed = 21; seed <= 24; ++seed) {
    // All on the CPU, and split, both with op offload.
    const ModelPlacement p = seed % 2 ? place_model(*m, {"CPU", "TEST0"}, {}) : random_placement(*m, seed, 0);
    SCOPED_TRACE("seed " + std::to_string(seed) + ": " + p.summary());
    Split s = make_split(*m, p, seed, -1, true);
    const auto got = run(*m, *s.sched, prompt, 4);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "step " << i;
  }
}

// A layer split over two devices (-sm layer on two GPUs): consecutive
// layers on each in the asked shares, activations passed device to device,
// the embedding on the first and the head on the last; bit for bit the CPU's,
// one host wait a decoded token.
TEST_P(SchedulerChaos, LayerSplitOverTwoDevices) {
  const auto m = tiny(GetParam());
  const auto prompt = tokens(*m, 40, 3);
  CpuBackend cpu(kThreads);
  const auto want = run(*m, cpu, prompt, 4);
  for (const std::vector<double>& split : {std::vector<double>{}, std::vector<double>{3, 1}}) {
    PlacementRequest r;
    r.n_gpu_layers = 99;
    r.split = split;
    const ModelPlacement p = place_model(*m, {"CPU", "TEST0", "TEST1"}, r);
    SCOPED_TRACE(p.summary());
    EXPECT_EQ(p.input, 1);
    EXPECT_EQ(p.output, 2);
    const int64_t L = m->hparams().n_layer;
    int64_t on_first = 0;
    for (int64_t il = 0; il < L; ++il) {
      EXPECT_NE(p.layer[size_t(il)], 0);
      if (il > 0) EXPECT_GE(p.layer[size_t(il)], p.layer[size_t(il - 1)]);  // consecutive
      on_first += p.layer[size_t(il)] == 1;
    }
    const double share = split.empty() ? 0.5 : 0.75;
    EXPECT_NEAR(double(on_first), share * double(L), 1.0);
    CpuBackend host(kThreads);
    test::ChaosOptions a, b;
    a.seed = 31;
    b.seed = 32;
    auto d0 = test::make_chaos_backend(a), d1 = test::make_chaos_backend(b);
    sched::Scheduler sched({&host, d0.get(), d1.get()}, p.for_scheduler(*m), {});
    const auto got = run(*m, sched, prompt, 4);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "step " << i;
    Session s(*m, sched, params());
    s.eval(prompt);
    const int32_t t[1] = {3};
    s.eval(t);
    const uint64_t w0 = sched.stats().host_waits;
    s.eval(t);
    EXPECT_EQ(sched.stats().host_waits - w0, 1u);
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, SchedulerChaos, ::testing::Values("llama", "qwen2", "qwen3", "gemma3", "qwen3moe"),
                         [](const auto& info) { return info.param; });

// Host waits per decoded token, for random placements: the same every step,
// exactly 1 with nothing on the device, at least 2 when a device's result
// comes back to the CPU for the head.
TEST(SchedulerWaits, SteadyPerTokenForEveryPlacement) {
  const auto m = tiny("llama");
  const auto prompt = tokens(*m, 8, 5);
  for (uint64_t seed : {1, 2, 3, 4, 5, 6}) {
    const ModelPlacement p = random_placement(*m, seed, int(seed % 2));
    Split s = make_split(*m, p, seed);
    Session session(*m, *s.sched, params());
    session.eval(prompt);
    const int32_t t[1] = {3};
    session.eval(t);  // the decode graph is planned now
    std::vector<uint64_t> per_step;
    for (int i = 0; i < 4; ++i) {
      const uint64_t b0 = s.sched->stats().host_waits;
      session.eval(t);
      per_step.push_back(s.sched->stats().host_waits - b0);
    }
    for (uint64_t w : per_step) EXPECT_EQ(w, per_step[0]) << p.summary();
    bool any_device = false;
    for (int d : p.layer) any_device = any_device || d == 1;
    if (!any_device && p.output == 0) EXPECT_EQ(per_step[0], 1u) << p.summary();
    if (any_device && p.output == 0) EXPECT_GE(per_step[0], 2u) << p.summary();
  }
}

// The formula against the plan itself: a model with layer 0 on the CPU,
// layer 1 on the device, the head on the CPU crosses back once.
TEST(SchedulerWaits, FormulaOnAKnownPlacement) {
  const auto m = tiny("llama");
  PlacementRequest r;
  r.overrides.push_back(parse_tensor_override("blk\\.1\\.=TEST0"));
  const ModelPlacement p = place_model(*m, {"CPU", "TEST0"}, r);
  Split s = make_split(*m, p, 9);
  Session session(*m, *s.sched, params());
  const int32_t t[1] = {3};
  session.eval(t);
  const uint64_t b0 = s.sched->stats().host_waits;
  session.eval(t);
  EXPECT_EQ(s.sched->stats().host_waits - b0, 2u);  // 1 + one device -> host boundary
}

// A mixture of experts with every layer on the device but its expert
// weights on the CPU (-ngl 99 --cpu-moe): the expert products run on the
// CPU (where their weights are: not copied to the device), one device ->
// host crossing a layer, so 1 + n_layer host waits a decoded token and no
// more; the logits are the CPU's bit for bit. (With the products on the
// device this would count 1.)
TEST(SchedulerWaits, ExpertsOnTheCpuOneCrossingALayer) {
  const auto m = tiny("qwen3moe");
  const auto prompt = tokens(*m, 40, 3);
  CpuBackend cpu(kThreads);
  const auto want = run(*m, cpu, prompt, 4);
  PlacementRequest r;
  r.n_gpu_layers = 99;
  r.overrides.push_back(parse_tensor_override("\\.ffn_(gate|up|down)_exps\\.=CPU"));
  const ModelPlacement p = place_model(*m, {"CPU", "TEST0"}, r);
  SCOPED_TRACE(p.summary());
  Split s = make_split(*m, p, 12);
  const auto got = run(*m, *s.sched, prompt, 4);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "step " << i;
  Session session(*m, *s.sched, params());
  const int32_t t[1] = {3};
  session.eval(t);
  session.eval(t);
  const uint64_t b0 = s.sched->stats().host_waits;
  session.eval(t);
  EXPECT_EQ(s.sched->stats().host_waits - b0, uint64_t(1 + m->hparams().n_layer));
}

// One wait left out on purpose: the chaos backend must notice (some step's
// logits differ from the CPU's), or the tests above prove nothing.
TEST(SchedulerChaosCatches, AMissingWait) {
  const auto m = tiny("llama");
  const auto prompt = tokens(*m, 40, 3);
  CpuBackend cpu(kThreads);
  const auto want = run(*m, cpu, prompt, 4);
  PlacementRequest r;
  r.overrides.push_back(parse_tensor_override("blk\\.1\\.=TEST0"));
  const ModelPlacement p = place_model(*m, {"CPU", "TEST0"}, r);
  bool caught = false;
  for (uint64_t seed = 1; seed <= 5 && !caught; ++seed) {
    Split s = make_split(*m, p, seed, /*skip_wait=*/0);
    const auto got = run(*m, *s.sched, prompt, 4);
    for (size_t i = 0; i < want.size(); ++i) caught = caught || got[i] != want[i];
  }
  EXPECT_TRUE(caught) << "a missing wait went unnoticed";
}

}  // namespace
}  // namespace weir
