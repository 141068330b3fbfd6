// Taking tokens back (Session::truncate: speculative decoding's refused
// guesses) on every backend (cpu, chaos: the scheduler's split; cuda on a
// GPU host). A prompt, then 4 guesses as one step, 1 kept, then 2 more
// tokens: the logits must equal, bit for bit, a session whose refused
// guesses were other tokens (the same steps' shapes and cells: nothing of
// the refused tokens may be left in the cache), and must agree with a
// session that never saw them (other steps' shapes: within the backend's
// rounding). Also sequence 1 beside a sequence 2 that holds cells too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/session.h"
#include "model/model.h"
#include "op_check.h"
#include "tiny_synth.h"

namespace weir {
namespace {

using V = std::vector<int32_t>;

class Truncate : public test::OnEveryBackend<std::string> {};

std::vector<float> last_logits(Session& s, int64_t n_vocab) {
  const float* l = s.logits();
  return std::vector<float>(l, l + n_vocab);
}

TEST_P(Truncate, RefusedGuessesLeaveNothingBehind) {
  for (const char* arch : {"llama", "gemma3"}) {
    SCOPED_TRACE(arch);
    auto model = Model::load(test::synth_tiny(arch, "truncate"));
    const int64_t nv = model->hparams().n_vocab;
    const V prompt = {1, 17, 300, 42, 5, 200, 99, 260, 3, 77};
    const V guesses = {12, 13, 14, 15}, others = {12, 400, 401, 402}, after = {33, 34};
    SessionParams sp;
    sp.n_ctx = 64;
    auto run = [&](const V& step, bool take_back, bool other_seq) {
      Session s(*model, b(), sp);
      if (other_seq) s.fill(2, V{7, 8, 9, 10, 11});  // another sequence holds cells too
      const int32_t seq = other_seq ? 1 : 0;
      auto eval = [&](const V& t) {
        if (other_seq) {
          const V seqs(t.size(), seq);
          const V rows = {int32_t(t.size()) - 1};
          s.step_logits(t, seqs, rows);
        } else {
          s.eval(t);
        }
      };
      eval(prompt);
      eval(step);
      if (take_back) s.truncate(seq, int64_t(prompt.size()) + 1);
      EXPECT_EQ(s.seq_len(seq), int64_t(prompt.size()) + (take_back ? 1 : int64_t(step.size())));
      eval(after);
      return last_logits(s, nv);
    };
    for (bool other_seq : {false, true}) {
      SCOPED_TRACE(other_seq ? "sequence 1 beside sequence 2" : "sequence 0 alone");
      const auto a = run(guesses, true, other_seq), b2 = run(others, true, other_seq);
      EXPECT_EQ(0, std::memcmp(a.data(), b2.data(), a.size() * sizeof(float))) << "refused guesses left a trace";
      // Never guessed: the prompt, the kept guess, then the rest.
      const auto c = run(V{guesses[0]}, false, other_seq);
      double diff = 0, scale = 0;
      for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, double(std::fabs(a[i] - c[i]))), scale = std::max(scale, double(std::fabs(c[i])));
      EXPECT_LT(diff / scale, cuda() ? 4e-2 : 1e-4);
    }
  }
}

TEST_P(Truncate, RefusesToKeepMoreThanThereIs) {
  auto model = Model::load(test::synth_tiny("llama", "truncate-bad"));
  SessionParams sp;
  sp.n_ctx = 32;
  Session s(*model, b(), sp);
  s.eval(V{1, 2, 3});
  EXPECT_THROW(s.truncate(0, 4), Error);
  EXPECT_THROW(s.truncate(0, -1), Error);
  EXPECT_THROW(s.truncate(-1, 0), Error);
  s.truncate(0, 3);  // nothing to let go
  EXPECT_EQ(s.seq_len(0), 3);
  s.truncate(0, 0);
  EXPECT_EQ(s.seq_len(0), 0);
  s.eval(V{4, 5});
  EXPECT_EQ(s.seq_len(0), 2);
}

INSTANTIATE_TEST_SUITE_P(Backends, Truncate, ::testing::ValuesIn(test::backend_names()), test::ParamName());

}  // namespace
}  // namespace weir
