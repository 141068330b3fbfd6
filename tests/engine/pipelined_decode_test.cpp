// Pipelined generation (Session::queue_sample_next / take_sampled): each
// step takes as its token the one the step before sampled, copied on the
// backend, and is queued before the host waits for that token. It must
// generate what eval_sample() step by step generates, with one host wait a
// token, and cancel_queued() must leave the session where the step-by-step
// one is (cache and random draws), so that generation goes on the same (CPU
// backend, greedy and sampled).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/session.h"
#include "model/model.h"
#include "model/synth.h"
#include "test_env.h"
#include "tiny_synth.h"

namespace weir {
namespace {

std::vector<int32_t> prompt_for(const Model& m, int n) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(m.hparams().n_vocab) - 1);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = tok(rng);
  return p;
}

// Step by step: eval_sample() on each token.
std::vector<int32_t> stepwise(Session& s, const std::vector<int32_t>& prompt, int n, const BackendSampling& bs) {
  std::vector<int32_t> out = {s.eval_sample(prompt, bs)};
  while (int(out.size()) < n) {
    const int32_t t[1] = {out.back()};
    out.push_back(s.eval_sample(t, bs));
  }
  return out;
}

// As `weir run` does: the step for each token queued while the token after
// it is wanted, then that token taken.
std::vector<int32_t> pipelined(Session& s, const std::vector<int32_t>& prompt, int n, const BackendSampling& bs) {
  std::vector<int32_t> out = {s.eval_sample(prompt, bs)};
  if (n > 1) s.queue_sample_next(bs);
  while (int(out.size()) < n) {
    if (int(out.size()) + 1 < n) s.queue_sample_next(bs);
    out.push_back(s.take_sampled());
  }
  EXPECT_EQ(s.n_queued(), 0u);
  return out;
}

class PipelinedDecode : public testing::TestWithParam<std::string> {};

TEST_P(PipelinedDecode, GeneratesWhatStepwiseDoes) {
  auto model = Model::load(test::synth_tiny(GetParam(), "pipelined"));
  CpuBackend cpu(2);
  const std::vector<int32_t> prompt = prompt_for(*model, 7);
  const int n = 14;
  SessionParams sp;
  sp.n_ctx = 7 + n;  // the last pipelined step fits exactly
  for (float temp : {0.0f, 0.9f}) {
    BackendSampling bs;
    bs.temperature = temp;
    bs.seed = 42;
    Session a(*model, cpu, sp), b(*model, cpu, sp);
    const std::vector<int32_t> want = stepwise(a, prompt, n, bs);
    const uint64_t w0 = cpu.stats().host_waits;
    const std::vector<int32_t> got = pipelined(b, prompt, n, bs);
    EXPECT_EQ(got, want) << "temperature " << temp;
    EXPECT_EQ(cpu.stats().host_waits - w0, uint64_t(n)) << "one host wait a token";
    EXPECT_EQ(b.n_past(), a.n_past());
  }
}

TEST_P(PipelinedDecode, CancelLeavesTheSessionAsStepwise) {
  auto model = Model::load(test::synth_tiny(GetParam(), "pipelined"));
  CpuBackend cpu(2);
  const std::vector<int32_t> prompt = prompt_for(*model, 5);
  BackendSampling bs;  // sampled: the cancel gives the draws back too
  bs.temperature = 0.9f;
  bs.seed = 3;
  SessionParams sp;
  sp.n_ctx = 64;
  Session a(*model, cpu, sp), b(*model, cpu, sp);
  // Stepwise: 6 tokens, then 4 more from the last one.
  std::vector<int32_t> want = stepwise(a, prompt, 6, bs);
  const int32_t last[1] = {want.back()};
  const std::vector<int32_t> more = stepwise(a, std::vector<int32_t>(last, last + 1), 4, bs);
  // Pipelined: 6 tokens with two steps queued past them, cancelled.
  std::vector<int32_t> got = {b.eval_sample(prompt, bs)};
  b.queue_sample_next(bs);
  while (got.size() < 6) {
    b.queue_sample_next(bs);
    got.push_back(b.take_sampled());
  }
  EXPECT_EQ(b.n_queued(), 1u);
  b.queue_sample_next(bs);  // two queued
  EXPECT_THROW(b.queue_sample_next(bs), Error) << "at most kMaxQueued";
  EXPECT_THROW(b.eval(prompt), Error) << "eval with steps queued";
  b.cancel_queued();
  EXPECT_EQ(got, want);
  EXPECT_EQ(b.n_past(), a.n_past() - 4) << "the cancelled steps' tokens are out of the cache";
  EXPECT_THROW(b.queue_sample_next(bs), Error) << "nothing to continue from after a cancel";
  EXPECT_EQ(stepwise(b, std::vector<int32_t>(last, last + 1), 4, bs), more);
  EXPECT_EQ(b.n_past(), a.n_past());
  Session c(*model, cpu, sp);
  EXPECT_THROW(c.queue_sample_next(bs), Error) << "nothing sampled yet";
}

INSTANTIATE_TEST_SUITE_P(Archs, PipelinedDecode, testing::Values("llama", "gemma3"));

}  // namespace
}  // namespace weir
