// Batched decode (Session::decode_sample): several sequences in one KV
// cache, one token each per step, must generate what each sequence
// generates alone in a session of its own (greedy, CPU backend). The
// sequences have prompts of different lengths and are passed out of order,
// so a mask that let a token see another sequence's cells, or a mix-up of
// rows and sequences, changes the tokens.
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

// n_seq > 1: the cache in regions (16 cells each here, so sequence 0,
// with 9 + 12 tokens, overflows its region into the shared cells).
void check_arch(const std::string& arch, int n_seq) {
  SCOPED_TRACE(arch + " n_seq " + std::to_string(n_seq));
  auto model = Model::load(test::synth_tiny(arch, "batched"));
  CpuBackend cpu(2);
  const int steps = 12;
  const std::vector<int32_t> seq_ids = {2, 0, 3};  // out of order; 1 unused
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(model->hparams().n_vocab) - 1);
  std::vector<std::vector<int32_t>> prompts;
  for (int len : {5, 9, 1}) {
    std::vector<int32_t> p(static_cast<size_t>(len), 0);
    for (auto& t : p) t = tok(rng);
    prompts.push_back(p);
  }
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(test::greedy_alone(*model, cpu, p, steps));

  SessionParams sp;
  sp.n_ctx = 64;
  sp.n_seq = n_seq;
  Session s(*model, cpu, sp);
  BackendSampling greedy;
  greedy.temperature = 0;
  std::vector<int32_t> last;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t> head(prompts[i].begin(), prompts[i].end() - 1);
    if (!head.empty()) {
      if (seq_ids[i] == 0)
        s.eval(head);
      else
        s.fill(seq_ids[i], head);
    }
    last.push_back(prompts[i].back());
  }
  for (int step = 0; step < steps; ++step) {
    const std::vector<int32_t> next = s.decode_sample(last, seq_ids, greedy);
    ASSERT_EQ(next.size(), prompts.size());
    for (size_t i = 0; i < next.size(); ++i)
      EXPECT_EQ(next[i], want[i][size_t(step)]) << arch << " sequence " << seq_ids[i] << " step " << step;
    last = next;
  }
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(s.seq_len(seq_ids[i]), int64_t(prompts[i].size()) - 1 + steps);  // the last sampled token is not in yet
}

TEST(BatchedDecode, MatchesEachSequenceAloneLlama) {
  check_arch("llama", 1);
  check_arch("llama", 4);
}
TEST(BatchedDecode, MatchesEachSequenceAloneGemma3) {  // sliding-window masks
  check_arch("gemma3", 1);
  check_arch("gemma3", 4);
}

TEST(BatchedDecode, RejectsRepeatedSequences) {
  auto model = Model::load(test::synth_tiny("llama", "batched"));
  CpuBackend cpu(1);
  Session s(*model, cpu, SessionParams{});
  const std::vector<int32_t> toks = {1, 2}, seqs = {4, 4};
  EXPECT_THROW(s.decode_sample(toks, seqs, BackendSampling{}), Error);
  EXPECT_THROW(s.fill(0, toks), Error);
}

}  // namespace
}  // namespace weir
