// Running jobs through a Batcher to the end and collecting what each one
// gave (the speculative-decoding tests compare such runs with and without
// guesses).
#pragma once
#include <cstdint>
#include <future>
#include <string>
#include <vector>

#include "engine/batcher.h"

namespace weir::test {

struct JobOutcome {
  std::string text, why;
  int64_t completion = 0;
  std::vector<int32_t> ids;  // with top_logprobs >= 0
  std::vector<float> logprobs;
};

// Submits the jobs together (before start: they begin together), waits for
// all of them, stops the loop; returns each job's outcome, in order, and
// the loop's stats in *stats.
inline std::vector<JobOutcome> run_jobs(Batcher& engine, const std::vector<Job>& jobs, Batcher::Stats* stats) {
  std::vector<JobOutcome> out(jobs.size());
  std::vector<std::promise<void>> done(jobs.size());
  std::vector<Job> copies;
  for (size_t i = 0; i < jobs.size(); ++i) {
    Job j = jobs[i];
    JobOutcome* o = &out[i];
    j.on_text = [o](const std::string& text) { o->text += text; };
    j.on_token = [o](const HostSample& h) {
      o->ids.push_back(h.id);
      o->logprobs.push_back(h.logprob);
    };
    j.on_done = [o, &done, i](const std::string& why, const JobCounts& c) {
      o->why = why;
      o->completion = c.completion_tokens;
      done[i].set_value();
    };
    j.on_error = [o, &done, i](const std::string& e) {
      o->why = "error: " + e;
      done[i].set_value();
    };
    copies.push_back(std::move(j));
  }
  engine.submit_all(std::move(copies));
  engine.start();
  for (auto& d : done) d.get_future().get();
  engine.stop();
  *stats = engine.stats();
  return out;
}

}  // namespace weir::test
