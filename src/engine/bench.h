// Benchmark tests as llama-bench defines them, run through a Session:
// pp<P> processes P random tokens in batches from an empty cache (logits of
// the last token only); tg<N> decodes N single tokens; "@ d<D>" first fills
// the cache with D tokens, untimed. "tg<N> x<S>" (weir's own) decodes S
// sequences at once, N steps of one token each (batched decode; each
// sequence first holds D tokens), and counts all N * S tokens; "pp<P> x<S>"
// (weir's own) processes S prompts of P tokens at once in steps of the
// batch size, the prompts one after another (a step ends one and begins the
// next, as weir serve takes a burst of requests), and counts all P * S
// tokens. Each test is
// repeated; t/s is computed per repetition, then averaged (mean, sample
// standard deviation).
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "engine/draft_length.h"
#include "engine/draft_proposer.h"
#include "engine/session.h"
#include "model/model.h"

namespace weir {

struct BenchTest {
  std::string model;  // file path
  int n_prompt = 0, n_gen = 0, n_depth = 0;
  int n_batch = 2048, n_ubatch = 512;
  int n_threads = 1;
  int n_gpu_layers = 0;  // 0: CPU; more: the whole model on the GPU
  int n_parallel = 1;    // tg: sequences decoded at once
  // tg: each sequence's tokens constrained by a grammar (engine/grammar):
  // "" none, "object" any JSON object, else a JSON schema's text;
  // schema_name says which in the test's name.
  std::string json_schema, schema_name;
  // tg: speculative decoding's proposer ("" : the plain loop, as llama-bench;
  // "off", "ngram", "draft": through engine/generator.h, greedy, with that
  // proposer, BenchRunOptions::proposer).
  std::string spec;
  // "pp512", "tg128", "pp512+tg128", "tg128 x64", with " @ d<D>" when
  // n_depth > 0, " +json <name>" under a grammar and " +spec <p>" with a
  // proposer.
  std::string name() const;
  int64_t n_ctx() const;  // KV cache cells the test needs
};

// The test lists of a run; every combination becomes tests (expand_tests).
struct BenchPlan {
  std::vector<std::string> models;
  std::vector<int> n_prompt{512}, n_gen{128}, n_depth{0};
  std::vector<int> n_batch{2048}, n_ubatch{512}, n_threads{1}, n_gpu_layers{0};
  std::vector<int> n_parallel{1};  // pp and tg tests: sequences at once
  // tg tests only: {schema_name, json_schema} pairs (BenchTest), {"", ""} for none.
  std::vector<std::pair<std::string, std::string>> json_schemas{{"", ""}};
  // tg tests only, one sequence: speculative decoding's proposers ({""}:
  // the plain loop alone).
  std::vector<std::string> spec{""};
};

// llama-bench's order: model, batch, ubatch, threads, gpu layers, depth outermost to
// innermost, then the pp tests and the tg tests of that combination. Sizes
// of 0 make no test.
std::vector<BenchTest> expand_tests(const BenchPlan& plan);

struct BenchResult {
  BenchTest test;
  // Tests with a proposer: over the timed repetitions, the share of guesses
  // kept and the tokens a target step gave.
  double spec_acceptance = 0, spec_tokens_per_step = 0;
  std::string test_time;          // RFC 3339, UTC, when the test started
  std::vector<uint64_t> samples_ns;

  std::vector<double> samples_ts() const;  // (n_prompt + n_gen) * n_parallel / seconds, per repetition
  double avg_ts() const;
  double stdev_ts() const;
  uint64_t avg_ns() const;
  uint64_t stdev_ns() const;
};

double bench_mean(const std::vector<double>& v);
// Sample standard deviation (n - 1); 0 for fewer than two values.
double bench_stdev(const std::vector<double>& v);

struct BenchRunOptions {
  int reps = 5;
  bool warmup = true;  // one untimed run first (pp: the full prompt; tg: one token)
  DType kv_type = DType::F16;
  uint32_t seed = 1;   // random tokens
  const std::atomic<bool>* stop = nullptr;  // SessionParams::stop
  // tg on a backend that samples: the next step queued before the host
  // waits (Session::queue_sample_next); off: step by step (for comparisons).
  bool pipelined = true;
  // Tensor parallelism: the test's session is rank 0 of this group, with
  // these peers (SessionParams::tp, peers).
  TensorParallel tp;
  std::vector<SessionParams::Peer> peers;
  int grammar_threads = 0;  // tests under a grammar: threads computing the masks (0: as weir serve, the host's up to 16)
  // tg tests: the context before the generated tokens (untimed) is these
  // tokens instead of n_depth random ones (a text to rewrite, for
  // speculative decoding); n_depth must be their count.
  std::vector<int32_t> context;
  // Tests with spec "ngram" or "draft": the proposer (engine/spec_setup.h)
  // and the draft length's bounds.
  DraftProposer* proposer = nullptr;
  DraftLengthOptions draft_length;
};

// Runs one test on `backend` (whose thread count the caller chose to match
// t.n_threads). On a backend without host-visible memory (a GPU), a tg step
// samples its token on the backend (greedy) and copies back only the id, as
// `weir run` does there; on the CPU it copies the logits back, as
// llama-bench does.
BenchResult run_bench_test(const Model& model, Backend& backend, const BenchTest& t, const BenchRunOptions& o);

// What a speculative step costs on this device (issue 48): one sequence at
// `depth` cells, a step that checks k random guesses (k + 1 tokens, one host
// wait: Session::eval_guesses) for k = 0 .. k_max, the median of o.reps
// steps each; and plain pipelined decoding's time a token beside it.
struct VerifyCurve {
  int depth = 0;
  std::vector<double> step_ms;  // [k]
  double plain_ms = 0;          // a token of pipelined plain decoding (tg)
  // Tokens a second over plain decoding's with k guesses kept at rate a
  // (E(k) = (1 - a^(k+1)) / (1 - a) tokens a step of step_ms[k]).
  double speedup(int k, double a) const;
  int best_k(double a) const;  // the k that maximizes speedup(k, a)
};
VerifyCurve measure_verify_curve(const Model& model, Backend& backend, int k_max, int depth, const BenchRunOptions& o);

}  // namespace weir
