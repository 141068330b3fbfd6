// The serving loop: plan_step's packing on its own, then the engine on a
// tiny model (CPU): jobs submitted from several threads at once each get
// the text they get alone (greedy), a cancelled job frees its cells, the
// queue refuses past its limit, and a prompt longer than the context is
// refused naming both lengths.
#include "server/generation_engine.h"

#include <gtest/gtest.h>

#include <future>
#include <random>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "model/model.h"
#include "model/synth.h"
#include "test_env.h"
#include "tiny_synth.h"

namespace weir::server {
namespace {

TEST(PlanStep, DecodeFirstThenPromptChunks) {
  std::vector<ActiveView> v = {{10, 4, false, -1, 3}, {5, 5, true, 42, 0}, {7, 0, false, -1, 1}, {3, 3, true, 9, 2}};
  StepPlan p = plan_step(v, 8);
  // Decode tokens of requests 1 and 3, then 6 of request 0's remaining 6 (it completes), nothing of 2.
  EXPECT_EQ(p.seqs, (std::vector<int32_t>{0, 2, 3, 3, 3, 3, 3, 3}));
  EXPECT_EQ(p.tokens[0], 42);
  EXPECT_EQ(p.tokens[1], 9);
  EXPECT_EQ(p.out_rows, (std::vector<int32_t>{0, 1, 7}));
  EXPECT_EQ(p.out_owner, (std::vector<size_t>{1, 3, 0}));
  EXPECT_EQ(p.prompt_taken, (std::vector<size_t>{6, 0, 0, 0}));
  // Only the middle of a prompt: one row, owned by nobody.
  p = plan_step({{20, 0, false, -1, 0}}, 8);
  EXPECT_EQ(p.tokens.size(), 8u);
  EXPECT_EQ(p.out_rows, std::vector<int32_t>{7});
  EXPECT_EQ(p.out_owner, std::vector<size_t>{SIZE_MAX});
}

struct Tiny {
  std::unique_ptr<Model> model;
  CpuBackend cpu{2};
  Tiny() : model(Model::load(test::synth_tiny("llama", "engine"))) {}
  // The greedy text of a prompt alone in a session of its own.
  std::string alone(const std::vector<int32_t>& prompt, int n) {
    Utf8Streamer u;
    std::string text;
    for (int32_t id : test::greedy_alone(*model, cpu, prompt, n)) text += u.push(model->tokenizer().token_to_piece(id, false));
    return text + u.flush();
  }
};

Job greedy_job(std::vector<int32_t> prompt, int n) {
  Job j;
  j.prompt = std::move(prompt);
  j.max_tokens = n;
  j.temperature = 0;
  j.ignore_eos = true;
  return j;
}

TEST(GenerationEngine, ConcurrentJobsEqualEachAlone) {
  Tiny t;
  SessionParams sp;
  sp.n_ctx = 512;
  sp.n_batch = 16;
  Session s(*t.model, t.cpu, sp);
  EngineOptions eo;
  eo.max_sequences = 3;  // six jobs: some wait for a free sequence
  eo.step_tokens = 16;
  GenerationEngine engine(s, t.model->tokenizer(), eo);
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(t.model->hparams().n_vocab) - 1);
  std::vector<std::vector<int32_t>> prompts;
  for (int len : {20, 3, 9, 33, 1, 12}) {
    std::vector<int32_t> p;
    for (int i = 0; i < len; ++i) p.push_back(tok(rng));
    prompts.push_back(p);
  }
  const int n = 10;
  // What each makes alone, first: the backend serves one thread at a time.
  std::vector<std::string> want;
  for (const auto& p : prompts) want.push_back(t.alone(p, n));
  engine.start();
  std::vector<std::promise<std::pair<std::string, std::string>>> results(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i)
    clients.emplace_back([&, i] {
      auto text = std::make_shared<std::string>();
      Job j = greedy_job(prompts[i], n);
      j.on_text = [text](const std::string& s) { *text += s; };
      j.on_done = [&, i, text](const std::string& why, int64_t, int64_t) { results[i].set_value({*text, why}); };
      j.on_error = [&, i](const std::string& e) { results[i].set_value({"", "error: " + e}); };
      engine.submit(std::move(j));
    });
  for (auto& c : clients) c.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto [text, why] = results[i].get_future().get();
    EXPECT_EQ(why, "length") << "job " << i;
    EXPECT_EQ(text, want[i]) << "job " << i;
  }
  engine.stop();  // the last step's counts are in once the loop has ended
  const auto st = engine.stats();
  EXPECT_EQ(st.requests, prompts.size());
  EXPECT_EQ(st.generated_tokens, prompts.size() * size_t(n));
  EXPECT_EQ(st.kv_cells_used, 0) << "finished jobs give their cells back";
}

TEST(GenerationEngine, CancelQueueLimitAndTooLong) {
  Tiny t;
  SessionParams sp;
  sp.n_ctx = 256;
  sp.n_batch = 8;
  Session s(*t.model, t.cpu, sp);
  EngineOptions eo;
  eo.max_sequences = 1;
  eo.step_tokens = 8;
  eo.queue_limit = 2;
  GenerationEngine engine(s, t.model->tokenizer(), eo);
  // Before the loop starts nothing leaves the queue: the third waits past the limit.
  engine.submit(greedy_job({1, 2, 3}, 4));
  std::promise<std::string> cancelled;
  Job long_job = greedy_job({4, 5, 6}, 200);
  long_job.on_done = [&](const std::string& why, int64_t, int64_t) { cancelled.set_value(why); };
  const uint64_t id = engine.submit(std::move(long_job));
  EXPECT_THROW(engine.submit(greedy_job({7}, 4)), QueueFull);
  try {
    engine.submit(greedy_job(std::vector<int32_t>(300, 1), 4));
    ADD_FAILURE() << "a prompt longer than the context was taken";
  } catch (const QueueFull&) {
    ADD_FAILURE() << "refused as a full queue, not as too long";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("300"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("256"), std::string::npos) << e.what();
  }
  engine.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  engine.cancel(id);
  auto f = cancelled.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  const std::string why = f.get();
  EXPECT_TRUE(why == "cancelled" || why == "length") << why;
  engine.stop();
  EXPECT_EQ(engine.stats().kv_cells_used, 0);
  EXPECT_EQ(s.kv_cache().extent() >= 0, true);
}

}  // namespace
}  // namespace weir::server
