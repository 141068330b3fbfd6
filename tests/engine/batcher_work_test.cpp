// Batcher::submit_work (the embeddings of /v1/embeddings) runs on the
// engine's thread between generation steps: generation jobs running beside
// embedding works each get the text they get alone (greedy), each work's
// embeddings equal those of a session of its own, every cell comes back,
// and works still waiting when the loop stops get an error, not silence.
#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <random>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "engine/batcher.h"
#include "engine/embedding.h"
#include "model/model.h"
#include "text/utf8_streamer.h"
#include "tiny_synth.h"

namespace weir {
namespace {

std::vector<std::vector<int32_t>> random_inputs(std::mt19937& rng, int64_t n_vocab, std::initializer_list<int> lengths) {
  std::uniform_int_distribution<int32_t> tok(0, int32_t(n_vocab) - 1);
  std::vector<std::vector<int32_t>> out;
  for (int n : lengths) {
    std::vector<int32_t> s;
    for (int i = 0; i < n; ++i) s.push_back(tok(rng));
    out.push_back(s);
  }
  return out;
}

TEST(BatcherWork, EmbeddingsBetweenStepsLeaveGenerationAlone) {
  auto model = Model::load(test::synth_tiny("llama", "work"));
  CpuBackend cpu(2);
  std::mt19937 rng(11);
  const auto prompts = random_inputs(rng, model->hparams().n_vocab, {14, 3, 25, 7});
  const int n = 12;
  std::vector<std::string> want;
  for (const auto& p : prompts) {
    Utf8Streamer u;
    std::string text;
    for (int32_t id : test::greedy_alone(*model, cpu, p, n)) text += u.push(model->tokenizer().token_to_piece(id, false));
    want.push_back(text + u.flush());
  }
  std::vector<std::vector<std::vector<int32_t>>> work_inputs;
  std::vector<Embeddings> work_want;
  for (int w = 0; w < 6; ++w) {
    work_inputs.push_back(random_inputs(rng, model->hparams().n_vocab, {5 + w, 1, 30}));
    Session alone(*model, cpu, SessionParams{128, 16});
    EmbedOptions o;
    o.step_tokens = 16;
    work_want.push_back(embed_tokens(alone, work_inputs.back(), o));
  }

  SessionParams sp;
  sp.n_ctx = 512;
  sp.n_batch = 16;
  Session s(*model, cpu, sp);
  BatcherOptions eo;
  eo.max_sequences = 2;  // four jobs: two wait for a free sequence
  eo.step_tokens = 16;
  eo.kept_prefixes = 2;
  Batcher engine(s, model->tokenizer(), eo);
  EXPECT_EQ(engine.step_tokens(), 16u);
  engine.start();
  std::vector<std::promise<std::string>> texts(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    Job j;
    j.prompt = prompts[i];
    j.max_tokens = n;
    j.temperature = 0;
    j.ignore_eos = true;
    auto text = std::make_shared<std::string>();
    j.on_text = [text](const std::string& t) { *text += t; };
    j.on_done = [&texts, i, text](const std::string&, const JobCounts&) { texts[i].set_value(*text); };
    j.on_error = [&texts, i](const std::string& e) { texts[i].set_value("error: " + e); };
    engine.submit(std::move(j));
  }
  // The works arrive while the jobs generate, from threads of their own.
  std::vector<std::promise<Embeddings>> got(work_inputs.size());
  std::vector<int32_t> first_seqs(work_inputs.size(), -1);
  std::vector<std::thread> clients;
  for (size_t w = 0; w < work_inputs.size(); ++w)
    clients.emplace_back([&, w] {
      std::this_thread::sleep_for(std::chrono::milliseconds(3 * int(w)));
      Batcher::SessionWork work;
      work.cells = 64;
      work.run = [&, w](Session& session, int32_t first_seq) {
        first_seqs[w] = first_seq;
        EmbedOptions o;
        o.step_tokens = 16;
        o.first_seq = first_seq;
        got[w].set_value(embed_tokens(session, work_inputs[w], o));
      };
      work.on_error = [&, w](std::exception_ptr e) { got[w].set_exception(e); };
      engine.submit_work(std::move(work));
    });
  for (auto& c : clients) c.join();
  for (size_t w = 0; w < work_inputs.size(); ++w) {
    const Embeddings e = got[w].get_future().get();
    EXPECT_EQ(first_seqs[w], 4) << "above the jobs' and kept prefixes' ids (2 + 2)";
    ASSERT_EQ(e.vectors.size(), work_want[w].vectors.size());
    for (size_t i = 0; i < e.vectors.size(); ++i)
      for (size_t k = 0; k < e.vectors[i].size(); ++k)
        ASSERT_NEAR(e.vectors[i][k], work_want[w].vectors[i][k], 1e-5) << "work " << w << " input " << i;
  }
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(texts[i].get_future().get(), want[i]) << "job " << i;
  engine.stop();
  for (int32_t q = 4; q < 4 + 8; ++q) EXPECT_EQ(s.seq_len(q), 0) << "the works' sequences are freed";
}

// A work that throws reaches on_error; a stopped loop refuses new works;
// one queued when the loop stops is answered.
TEST(BatcherWork, ErrorsComeBackAndAStoppedLoopRefuses) {
  auto model = Model::load(test::synth_tiny("llama", "work-errors"));
  CpuBackend cpu(2);
  Session s(*model, cpu, SessionParams{128, 16});
  BatcherOptions eo;
  eo.step_tokens = 16;
  Batcher engine(s, model->tokenizer(), eo);
  engine.start();
  std::promise<std::string> failed;
  Batcher::SessionWork bad;
  bad.run = [](Session&, int32_t) { throw Error("no good"); };
  bad.on_error = [&](std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      failed.set_value(x.what());
    }
  };
  engine.submit_work(std::move(bad));
  EXPECT_EQ(failed.get_future().get(), "no good");
  engine.stop();
  Batcher::SessionWork late;
  late.run = [](Session&, int32_t) {};
  EXPECT_THROW(engine.submit_work(std::move(late)), QueueFull);

  // A work queued before the loop starts, and the loop stopped at once:
  // it runs or is refused, but it is answered.
  Batcher idle(s, model->tokenizer(), eo);
  std::promise<bool> refused;
  Batcher::SessionWork waiting;
  waiting.run = [&](Session&, int32_t) { refused.set_value(false); };
  waiting.on_error = [&](std::exception_ptr) { refused.set_value(true); };
  idle.submit_work(std::move(waiting));
  idle.start();
  idle.stop();
  EXPECT_TRUE(refused.get_future().wait_for(std::chrono::seconds(0)) == std::future_status::ready);
}

}  // namespace
}  // namespace weir
