// The serving loop: plan_step's packing on its own, then the engine on a
// tiny model (CPU): jobs submitted from several threads at once each get
// the text they get alone (greedy), a cancelled job frees its cells, the
// queue refuses past its limit, and a prompt longer than the context is
// refused naming both lengths. The prefix cache gives the text computing
// everything gives, and a cache too small for all the running jobs sets
// the newest back without changing anyone's text.
#include "engine/batcher.h"

#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <map>
#include <random>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "model/model.h"
#include "model/synth.h"
#include "test_env.h"
#include "tiny_synth.h"

namespace weir {
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

TEST(Batcher, ConcurrentJobsEqualEachAlone) {
  Tiny t;
  SessionParams sp;
  sp.n_ctx = 512;
  sp.n_batch = 16;
  Session s(*t.model, t.cpu, sp);
  BatcherOptions eo;
  eo.max_sequences = 3;  // six jobs: some wait for a free sequence
  eo.step_tokens = 16;
  eo.kept_prefixes = 0;  // (the prefix cache has tests of its own)
  Batcher engine(s, t.model->tokenizer(), eo);
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
      j.on_done = [&, i, text](const std::string& why, const JobCounts&) { results[i].set_value({*text, why}); };
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

// Runs jobs one after another (each submitted when the one before it is
// done, so each can reuse what came before) or all at once; returns texts.
std::vector<std::string> run_jobs(Batcher& engine, const std::vector<std::vector<int32_t>>& prompts, int n,
                                  bool at_once) {
  std::vector<std::promise<std::string>> done(prompts.size());
  std::vector<std::string> texts(prompts.size());
  auto submit = [&](size_t i) {
    Job j = greedy_job(prompts[i], n);
    j.on_text = [&texts, i](const std::string& s) { texts[i] += s; };
    j.on_done = [&done, i](const std::string& why, const JobCounts&) { done[i].set_value(why); };
    j.on_error = [&done, i](const std::string& e) { done[i].set_value("error: " + e); };
    engine.submit(std::move(j));
  };
  for (size_t i = 0; i < prompts.size(); ++i) {
    submit(i);
    if (!at_once) EXPECT_EQ(done[i].get_future().get(), "length") << "job " << i;
  }
  if (at_once)
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(done[i].get_future().get(), "length") << "job " << i;
  return texts;
}

TEST(Batcher, PrefixCacheGivesTheTextOfComputingItAll) {
  Tiny t;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(t.model->hparams().n_vocab) - 1);
  auto random_tokens = [&](int n) {
    std::vector<int32_t> v;
    for (int i = 0; i < n; ++i) v.push_back(tok(rng));
    return v;
  };
  // A shared "system prompt" and different questions; a second turn that
  // begins with a whole first conversation; one prompt that is a prefix of
  // another; the same prompt twice.
  const std::vector<int32_t> system = random_tokens(40);
  std::vector<std::vector<int32_t>> prompts;
  for (int len : {5, 9, 1, 14}) {
    auto p = system;
    for (int32_t x : random_tokens(len)) p.push_back(x);
    prompts.push_back(p);
  }
  prompts.push_back(prompts[0]);
  prompts.push_back(std::vector<int32_t>(system.begin(), system.begin() + 30));
  const int n = 8;
  std::vector<std::string> want;
  for (const auto& p : prompts) want.push_back(t.alone(p, n));
  for (bool at_once : {false, true}) {
    SessionParams sp;
    sp.n_ctx = 1024;
    sp.n_batch = 24;
    Session s(*t.model, t.cpu, sp);
    BatcherOptions eo;
    eo.max_sequences = 3;
    eo.step_tokens = 24;
    Batcher engine(s, t.model->tokenizer(), eo);
    engine.start();
    EXPECT_EQ(run_jobs(engine, prompts, n, at_once), want) << (at_once ? "at once" : "one after another");
    engine.stop();
    const auto st = engine.stats();
    // One after another: every job after the first reuses the 40 system
    // tokens at least (the repeated prompt all but its last token; the
    // short one 29 of its 30).
    if (!at_once) {
      EXPECT_GE(st.reused_tokens, 40u * 3 + (prompts[0].size() - 1) + 29);
    } else {
      EXPECT_GE(st.reused_tokens, 40u * 2) << "jobs that arrive together wait for the shared prompt";
    }
    EXPECT_EQ(st.prompt_tokens + st.reused_tokens, [&] {
      size_t all = 0;
      for (const auto& p : prompts) all += p.size();
      return all;
    }());
    EXPECT_GT(st.kept_prefixes, 0u);
  }
  // A second turn: the first conversation's prompt and answer, then more.
  SessionParams sp;
  sp.n_ctx = 512;
  sp.n_batch = 16;
  Session s(*t.model, t.cpu, sp);
  BatcherOptions eo;
  eo.step_tokens = 16;
  Batcher engine(s, t.model->tokenizer(), eo);
  engine.start();
  const std::vector<int32_t> first = prompts[1];
  const std::vector<int32_t> answer = test::greedy_alone(*t.model, t.cpu, first, n);
  run_jobs(engine, {first}, n, false);
  auto second = first;
  second.insert(second.end(), answer.begin(), answer.end() - 1);  // the last sampled token was never put in
  for (int32_t x : random_tokens(6)) second.push_back(x);
  EXPECT_EQ(run_jobs(engine, {second}, n, false), std::vector<std::string>{t.alone(second, n)});
  engine.stop();
  EXPECT_EQ(engine.stats().reused_tokens, first.size() + size_t(n) - 1);
}

// Greedy with OpenAI's penalties and the log-probabilities of each step,
// written plainly: a session's logits a token at a time. (A step of one
// token and a step of several differ in the logits' last bits, ~3e-4 on
// this model: the log-probabilities are compared to 2e-3.)
struct PlainStep {
  int32_t id;
  double logprob;
  std::vector<std::pair<int32_t, double>> top;
};
std::vector<PlainStep> plain_greedy(const Model& m, Backend& b, const std::vector<int32_t>& prompt, int steps,
                                    float presence, float frequency, int top_n) {
  SessionParams sp;
  sp.n_ctx = int64_t(prompt.size()) + steps + 1;
  Session s(m, b, sp);
  s.eval(prompt);
  std::map<int32_t, int> counts;
  std::vector<PlainStep> out;
  for (int i = 0; i < steps; ++i) {
    std::vector<double> x(s.logits(0), s.logits(0) + s.n_vocab());
    for (const auto& [id, c] : counts) x[size_t(id)] -= presence + frequency * c;
    const int32_t best = int32_t(std::max_element(x.begin(), x.end()) - x.begin());
    double sum = 0;
    for (double v : x) sum += std::exp(v - x[size_t(best)]);
    auto lp = [&](int32_t id) { return x[size_t(id)] - x[size_t(best)] - std::log(sum); };
    PlainStep st{best, lp(best), {}};
    std::vector<int32_t> order(x.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = int32_t(k);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t c) { return x[size_t(a)] > x[size_t(c)]; });
    for (int k = 0; k < top_n; ++k) st.top.push_back({order[size_t(k)], lp(order[size_t(k)])});
    out.push_back(st);
    ++counts[best];
    const int32_t t[1] = {best};
    s.eval(t);
  }
  return out;
}

TEST(Batcher, PenaltiesAndLogprobsOnTheHost) {
  Tiny t;
  const std::vector<int32_t> prompt = {5, 17, 3, 99, 42, 7};
  const int n = 12;
  SessionParams sp;
  sp.n_ctx = 256;
  sp.n_batch = 16;
  Session s(*t.model, t.cpu, sp);
  BatcherOptions eo;
  eo.step_tokens = 16;
  Batcher engine(s, t.model->tokenizer(), eo);
  engine.start();
  // Three jobs side by side: penalties and log-probabilities, log-probabilities
  // alone, and one sampled on the backend as usual in the same steps.
  struct Case {
    float presence, frequency;
    int top_n;
  };
  const std::vector<Case> cases = {{0.7f, 1.5f, 3}, {0.0f, 0.0f, 0}, {0.0f, 0.0f, -1}};
  std::vector<std::vector<HostSample>> got(cases.size());
  std::vector<std::promise<std::string>> done(cases.size());
  for (size_t c = 0; c < cases.size(); ++c) {
    Job j = greedy_job(prompt, n);
    j.presence_penalty = cases[c].presence;
    j.frequency_penalty = cases[c].frequency;
    j.top_logprobs = cases[c].top_n;
    j.on_token = [&got, c](const HostSample& h) { got[c].push_back(h); };
    j.on_done = [&done, c](const std::string& why, const JobCounts&) { done[c].set_value(why); };
    j.on_error = [&done, c](const std::string& e) { done[c].set_value(e); };
    engine.submit(std::move(j));
  }
  for (auto& d : done) EXPECT_EQ(d.get_future().get(), "length");
  engine.stop();
  for (size_t c = 0; c < 2; ++c) {
    const auto want = plain_greedy(*t.model, t.cpu, prompt, n, cases[c].presence, cases[c].frequency, cases[c].top_n);
    ASSERT_EQ(got[c].size(), want.size()) << "case " << c;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[c][i].id, want[i].id) << "case " << c << " token " << i;
      EXPECT_NEAR(got[c][i].logprob, want[i].logprob, 2e-3) << "case " << c << " token " << i;
      ASSERT_EQ(got[c][i].top.size(), want[i].top.size());
      for (size_t k = 0; k < want[i].top.size(); ++k) {
        EXPECT_EQ(got[c][i].top[k].id, want[i].top[k].first);
        EXPECT_NEAR(got[c][i].top[k].logprob, want[i].top[k].second, 2e-3);
      }
    }
  }
  EXPECT_TRUE(got[2].empty()) << "no log-probabilities asked for";
  // The penalties changed the text (else this test shows nothing about them).
  const auto plain = plain_greedy(*t.model, t.cpu, prompt, n, 0, 0, 0);
  bool differs = false;
  for (size_t i = 0; i < plain.size(); ++i) differs |= plain[i].id != got[0][i].id;
  EXPECT_TRUE(differs);
}

TEST(Batcher, TooSmallACacheSetsTheNewestBack) {
  Tiny t;
  std::vector<std::vector<int32_t>> prompts = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {11, 12, 13}, {14, 15, 16, 17, 18}};
  const int n = 30;  // three jobs of 33 to 40 cells in 64
  std::vector<std::string> want;
  for (const auto& p : prompts) want.push_back(t.alone(p, n));
  SessionParams sp;
  sp.n_ctx = 64;
  sp.n_batch = 8;
  Session s(*t.model, t.cpu, sp);
  BatcherOptions eo;
  eo.max_sequences = 3;
  eo.step_tokens = 8;
  eo.kept_prefixes = 0;
  Batcher engine(s, t.model->tokenizer(), eo);
  engine.start();
  EXPECT_EQ(run_jobs(engine, prompts, n, true), want);
  engine.stop();
  EXPECT_GT(engine.stats().set_back, 0u);
  EXPECT_EQ(engine.stats().kv_cells_used, 0);
}

TEST(Batcher, CancelQueueLimitAndTooLong) {
  Tiny t;
  SessionParams sp;
  sp.n_ctx = 256;
  sp.n_batch = 8;
  Session s(*t.model, t.cpu, sp);
  BatcherOptions eo;
  eo.max_sequences = 1;
  eo.step_tokens = 8;
  eo.queue_limit = 2;
  eo.kept_prefixes = 0;
  Batcher engine(s, t.model->tokenizer(), eo);
  // Before the loop starts nothing leaves the queue: the third waits past the limit.
  engine.submit(greedy_job({1, 2, 3}, 4));
  std::promise<std::string> cancelled;
  Job long_job = greedy_job({4, 5, 6}, 200);
  long_job.on_done = [&](const std::string& why, const JobCounts&) { cancelled.set_value(why); };
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
}  // namespace weir
