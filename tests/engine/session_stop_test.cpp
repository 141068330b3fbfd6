// Stopping work on request (SessionParams::stop, CpuOptions::stop): a step
// asked for after the flag is set throws Cancelled and leaves the session as
// it was; the CPU backend cuts a graph's run into segments and looks at the
// flag between them, without changing a bit of the result; a stop in the
// middle of a long prompt leaves the session at a batch boundary, from which
// it goes on to the same logits as a run never stopped.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/session.h"
#include "model/model.h"
#include "model/synth.h"
#include "test_env.h"

namespace weir {
namespace {

std::unique_ptr<Model> tiny_llama() {
  const std::string path = test::own_dir() + "/stop-llama.gguf";
  SynthOptions o;
  o.threads = 2;
  o.sync = false;
  write_synth_model(find_synth_preset("llama", "tiny"), o, path);
  return Model::load(path);
}

std::vector<int32_t> prompt_for(const Model& m, int n) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(m.hparams().n_vocab) - 1);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = tok(rng);
  return p;
}

std::vector<float> last_logits(const Session& s) { return {s.logits(), s.logits() + s.n_vocab()}; }

SessionParams params(const std::atomic<bool>* stop) {
  SessionParams p;
  p.n_ctx = 512;
  p.n_batch = 32;
  p.stop = stop;
  return p;
}

TEST(SessionStop, AStepAfterTheFlagThrowsAndChangesNothing) {
  auto m = tiny_llama();
  const auto prompt = prompt_for(*m, 40);
  CpuBackend ref_backend(2);
  Session ref(*m, ref_backend, params(nullptr));
  ref.eval(prompt);

  std::atomic<bool> stop{true};
  CpuBackend backend(2);
  Session s(*m, backend, params(&stop));
  EXPECT_THROW(s.eval(prompt), Cancelled);
  EXPECT_EQ(s.n_past(), 0);
  EXPECT_EQ(s.kv_cache().extent(), 0);
  stop = false;
  s.eval(prompt);
  EXPECT_EQ(s.n_past(), 40);
  EXPECT_EQ(last_logits(s), last_logits(ref));
}

TEST(SessionStop, SegmentedGraphRunsGiveTheSameBits) {
  auto m = tiny_llama();
  const auto prompt = prompt_for(*m, 70);
  CpuBackend whole(3);
  Session a(*m, whole, params(nullptr));
  a.eval(prompt);
  std::atomic<bool> stop{false};
  CpuOptions o;
  o.stop = &stop;
  o.segment_macs = 2000;  // a cut after nearly every node
  CpuBackend cut(3, o);
  Session b(*m, cut, params(&stop));
  b.eval(prompt);
  EXPECT_EQ(last_logits(a), last_logits(b));
}

// The flag turns at a random moment of a long prompt: whatever batch was
// running is taken back, and going on from there gives the same logits.
TEST(SessionStop, AStopMidPromptLeavesABatchBoundaryToGoOnFrom) {
  auto m = tiny_llama();
  const auto prompt = prompt_for(*m, 400);
  CpuBackend ref_backend(2);
  Session ref(*m, ref_backend, params(nullptr));
  ref.eval(prompt);
  int stopped = 0;
  for (int delay_us : {50, 200, 500, 1000, 2000, 4000, 8000}) {
    std::atomic<bool> stop{false};
    CpuOptions o;
    o.stop = &stop;
    o.segment_macs = 20000;
    CpuBackend backend(2, o);
    Session s(*m, backend, params(&stop));
    std::thread t([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      stop = true;
    });
    try {
      s.eval(prompt);
    } catch (const Cancelled&) {
      ++stopped;
    }
    t.join();
    ASSERT_EQ(s.n_past() % 32, 0) << "not at a batch boundary";
    ASSERT_EQ(s.kv_cache().extent(), s.n_past());
    stop = false;
    if (s.n_past() < int64_t(prompt.size()))
      s.eval(std::vector<int32_t>(prompt.begin() + s.n_past(), prompt.end()));
    EXPECT_EQ(s.n_past(), 400);
    EXPECT_EQ(last_logits(s), last_logits(ref)) << "stopped after " << delay_us << " us";
  }
  EXPECT_GT(stopped, 0) << "no run was stopped: the test proves nothing";
}

}  // namespace
}  // namespace weir
