#include "engine/bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>

#include "core/error.h"
#include "engine/generator.h"
#include "engine/grammar/grammar.h"
#include "engine/session.h"

namespace weir {
namespace {

constexpr int kSpecGraphs = Generator::kSpecGraphs;

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Random prompt tokens, the first one BOS when the model wants one.
class TokenSource {
 public:
  TokenSource(const Model& m, uint32_t seed)
      : rng_(seed), dist_(0, int32_t(m.hparams().n_vocab) - 1),
        bos_(m.tokenizer().vocab().add_bos && m.tokenizer().vocab().bos >= 0 ? m.tokenizer().vocab().bos : -1) {}
  std::vector<int32_t> take(int n, bool at_start) {
    std::vector<int32_t> v(size_t(std::max(n, 0)));
    for (auto& id : v) id = dist_(rng_);
    if (at_start && bos_ >= 0 && !v.empty()) v[0] = bos_;
    return v;
  }

 private:
  std::mt19937 rng_;
  std::uniform_int_distribution<int32_t> dist_;
  int32_t bos_;
};

void run_prompt(Session& s, TokenSource& src, int n) {
  if (n <= 0) return;
  const std::vector<int32_t> toks = src.take(n, s.n_past() == 0);
  s.eval(toks);  // the session splits it into batches; logits of the last token only
}

// On a backend that samples (a GPU) as `weir run` generates: the first token
// from the source, each next one the token the step before sampled, with
// the next step queued before the host waits for the one before it
// (Session::queue_sample_next); n steps, one host wait each.
// pipelined off: each step after the host has the token before it (for
// comparisons).
void run_gen(Session& s, TokenSource& src, int n, bool pipelined) {
  const bool on_backend = !s.backend().host_visible_memory();
  BackendSampling greedy;
  greedy.temperature = 0;
  if (on_backend && !pipelined) {
    for (int i = 0; i < n; ++i) s.eval_sample(src.take(1, s.n_past() == 0), greedy);
    return;
  }
  if (on_backend && n > 0) {
    s.eval_sample(src.take(1, s.n_past() == 0), greedy);
    for (int i = 1; i < n; ++i) {
      s.queue_sample_next(greedy);
      if (s.n_queued() == Session::kMaxQueued) s.take_sampled();
    }
    while (s.n_queued()) s.take_sampled();
    return;
  }
  for (int i = 0; i < n; ++i) s.eval(src.take(1, s.n_past() == 0));
}

// Batched decode: n steps of one random token for each of sequences 0..S-1.
void run_gen_parallel(Session& s, TokenSource& src, int n, int n_seq) {
  BackendSampling greedy;
  greedy.temperature = 0;
  std::vector<int32_t> seqs(static_cast<size_t>(n_seq), 0);
  for (int i = 0; i < n_seq; ++i) seqs[size_t(i)] = i;
  for (int i = 0; i < n; ++i) s.decode_sample(src.take(n_seq, false), seqs, greedy);
}

// Batched decode under a grammar: each step every sequence's mask of the
// tokens its grammar allows (on the grammar's threads), the step sampled
// among those (greedy), each token taken by its grammar and fed back. A
// grammar that ends (an end-of-generation token taken) starts again.
struct GrammarRun {
  std::vector<GrammarState> states;
  GrammarWorkers workers;
  std::vector<uint32_t> allow;
  std::vector<int32_t> last;
  GrammarRun(const std::shared_ptr<const CompiledGrammar>& g, int n_seq, int threads) : workers(threads) {
    for (int i = 0; i < n_seq; ++i) states.emplace_back(g);
  }
};

void run_gen_grammar(Session& s, TokenSource& src, GrammarRun& run, int n) {
  BackendSampling greedy;
  greedy.temperature = 0;
  const size_t n_seq = run.states.size();
  const int64_t words = allow_words(s.n_vocab());
  std::vector<int32_t> seqs(n_seq);
  for (size_t i = 0; i < n_seq; ++i) seqs[i] = int32_t(i);
  if (run.last.size() != n_seq) run.last = src.take(int(n_seq), false);
  run.allow.resize(n_seq * size_t(words));
  std::vector<GrammarState*> states;
  std::vector<uint32_t*> rows;
  for (size_t i = 0; i < n_seq; ++i) states.push_back(&run.states[i]), rows.push_back(&run.allow[i * size_t(words)]);
  for (int step = 0; step < n; ++step) {
    run.workers.fill_allowed(states, rows);
    run.last = s.decode_sample(run.last, seqs, greedy, run.allow);
    for (size_t i = 0; i < n_seq; ++i) {
      if (run.last[i] < 0) throw Error(std::string("bench: the grammar ") +
                                       (run.states[i].broken() ? "refused a token" : "allowed no token"));
      if (s.model().tokenizer().vocab().is_eog(run.last[i])) run.states[i].reset();  // starts again
      else run.states[i].accept_later(run.last[i]);  // taken with the next masks, in parallel
    }
  }
}

// Prefill of S prompts of n tokens at once, as weir serve takes a burst of
// them: steps of `step` tokens, the prompts in order (a step ends one and
// begins the next), each step sampling the token after every prompt it
// ends (greedy; one host wait a step).
void run_prompt_parallel(Session& s, TokenSource& src, int n, int n_seq, int step) {
  std::vector<int32_t> toks, seqs, rows;
  std::vector<float> params;
  auto flush = [&] {
    if (toks.empty()) return;
    if (rows.empty() || rows.back() != int32_t(toks.size()) - 1) {  // a prompt's middle: one row, ignored
      rows.push_back(int32_t(toks.size()) - 1);
      params.insert(params.end(), {0.0f, 0.0f, 1.0f, 0.0f, 0.5f});
    }
    s.step_sample(toks, seqs, rows, params);
    toks.clear(), seqs.clear(), rows.clear(), params.clear();
  };
  for (int q = 0; q < n_seq; ++q) {
    const std::vector<int32_t> p = src.take(n, true);
    for (int i = 0; i < n; ++i) {
      toks.push_back(p[size_t(i)]);
      seqs.push_back(q);
      if (i == n - 1) {
        rows.push_back(int32_t(toks.size()) - 1);
        params.insert(params.end(), {0.0f, 0.0f, 1.0f, 0.0f, 0.5f});
      }
      if (int(toks.size()) == step) flush();
    }
  }
  flush();
}

// Each of sequences 0..S-1 filled with n tokens (untimed context).
void run_depth_parallel(Session& s, TokenSource& src, int n, int n_seq) {
  if (n <= 0) return;
  run_prompt(s, src, n);
  for (int i = 1; i < n_seq; ++i) s.fill(i, src.take(n, true));
}

}  // namespace

// The cache cells a test needs.
int64_t BenchTest::n_ctx() const {
  return int64_t(std::max(1, n_parallel)) * (int64_t(n_depth) + n_prompt + n_gen + 1);
}

std::string BenchTest::name() const {
  std::string s;
  if (n_prompt > 0 && n_gen == 0) s = "pp" + std::to_string(n_prompt);
  else if (n_gen > 0 && n_prompt == 0) s = "tg" + std::to_string(n_gen);
  else s = "pp" + std::to_string(n_prompt) + "+tg" + std::to_string(n_gen);
  if (n_parallel > 1) s += " x" + std::to_string(n_parallel);
  if (n_depth > 0) s += " @ d" + std::to_string(n_depth);
  if (!json_schema.empty()) s += " +json " + schema_name;
  if (!spec.empty()) s += " +spec " + spec;
  return s;
}

std::vector<BenchTest> expand_tests(const BenchPlan& p) {
  std::vector<BenchTest> out;
  for (const auto& m : p.models)
    for (int nb : p.n_batch)
      for (int nub : p.n_ubatch)
        for (int nt : p.n_threads)
          for (int ngl : p.n_gpu_layers)
            for (int nd : p.n_depth) {
              BenchTest t{m, 0, 0, nd, nb, nub, nt, ngl};
              for (int np : p.n_prompt)
                for (int npar : p.n_parallel) {
                  if (np <= 0 || npar <= 0) continue;
                  t.n_prompt = np, t.n_gen = 0, t.n_parallel = npar;
                  out.push_back(t);
                }
              t.n_parallel = 1;
              for (int ng : p.n_gen)
                for (int np : p.n_parallel)
                  for (const auto& [name, schema] : p.json_schemas)
                    for (const std::string& spec : p.spec) {
                      if (ng <= 0 || np <= 0) continue;
                      if (!spec.empty() && (np > 1 || !schema.empty())) continue;  // one free sequence
                      t.n_prompt = 0, t.n_gen = ng, t.n_parallel = np;
                      t.schema_name = name, t.json_schema = schema;
                      t.spec = spec;
                      out.push_back(t);
                    }
              t.schema_name.clear(), t.json_schema.clear(), t.spec.clear();
            }
  return out;
}

double bench_mean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (double x : v) s += x;
  return s / double(v.size());
}

double bench_stdev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = bench_mean(v);
  double ss = 0;
  for (double x : v) ss += (x - m) * (x - m);
  return std::sqrt(ss / double(v.size() - 1));
}

std::vector<double> BenchResult::samples_ts() const {
  // (pp x S or tg x S: one of the two is 0)
  const double n = (double(test.n_prompt) + double(test.n_gen)) * double(std::max(1, test.n_parallel));
  std::vector<double> ts;
  for (uint64_t ns : samples_ns) ts.push_back(ns ? 1e9 * n / double(ns) : 0.0);
  return ts;
}
double BenchResult::avg_ts() const { return bench_mean(samples_ts()); }
double BenchResult::stdev_ts() const { return bench_stdev(samples_ts()); }
uint64_t BenchResult::avg_ns() const {
  return uint64_t(std::llround(bench_mean(std::vector<double>(samples_ns.begin(), samples_ns.end()))));
}
uint64_t BenchResult::stdev_ns() const {
  return uint64_t(std::llround(bench_stdev(std::vector<double>(samples_ns.begin(), samples_ns.end()))));
}

BenchResult run_bench_test(const Model& model, Backend& backend, const BenchTest& t, const BenchRunOptions& o) {
  if (t.n_prompt < 0 || t.n_gen < 0 || t.n_depth < 0 || t.n_prompt + t.n_gen <= 0)
    throw Error("bench: test " + t.name() + " has no tokens to time");
  if (t.n_batch < 1 || t.n_ubatch < 1) throw Error("bench: batch sizes must be positive");
  BenchResult r;
  r.test = t;
  r.test_time = utc_now();
  if (t.n_parallel < 1 || (t.n_parallel > 1 && t.n_prompt > 0 && t.n_gen > 0))
    throw Error("bench: test " + t.name() + ": parallel sequences are for pp or tg tests alone");
  SessionParams sp;
  sp.n_ctx = t.n_ctx();
  // weir has one batch level: a forward step takes at most min(b, ub) tokens,
  // which is what llama.cpp's physical batch (ubatch) is.
  sp.n_batch = std::min(t.n_batch, t.n_ubatch);
  sp.kv_type = o.kv_type;
  sp.n_seq = std::max(1, t.n_parallel);
  if (!t.spec.empty()) sp.max_graphs = kSpecGraphs;
  sp.stop = o.stop;
  sp.tp = o.tp;
  sp.peers = o.peers;
  Session s(model, backend, sp);
  TokenSource src(model, o.seed);

  // Under a grammar: the sequences' grammar states, compiled once (untimed).
  std::unique_ptr<GrammarRun> grammar;
  if (!t.json_schema.empty()) {
    if (t.n_gen <= 0 || t.n_prompt > 0) throw Error("bench: test " + t.name() + ": a grammar is for tg tests only");
    GrammarCompiler compiler(model.tokenizer(), s.n_vocab());
    GrammarSpec spec;
    spec.kind = t.json_schema == "object" ? GrammarSpec::Kind::JsonObject : GrammarSpec::Kind::JsonSchema;
    if (spec.kind == GrammarSpec::Kind::JsonSchema) spec.text = t.json_schema;
    grammar = std::make_unique<GrammarRun>(compiler.compile(spec), std::max(1, t.n_parallel), o.grammar_threads);
  }
  const bool parallel = t.n_parallel > 1 || grammar;
  if (!t.spec.empty() && (parallel || t.n_prompt > 0 || t.n_gen <= 0))
    throw Error("bench: test " + t.name() + ": speculative decoding is for tg tests of one free sequence");
  if (!t.spec.empty() && t.spec != "off" && !o.proposer) throw Error("bench: test " + t.name() + " has no proposer");
  if (!o.context.empty() && int64_t(o.context.size()) != t.n_depth)
    throw Error("bench: test " + t.name() + ": the context has " + std::to_string(o.context.size()) + " tokens, not -d");
  SpecStats spec_total;
  std::optional<DraftLength> learnt;
  // Speculative tests: greedy through the generator, from the context (or
  // a random token) on.
  auto gen_spec = [&](int n) {
    GeneratorSampling how;
    how.on_backend = true;
    how.backend.temperature = 0;
    // Each repetition starts from what the ones before learnt (the warm-up's
    // too), as a program that keeps generating would.
    Generator g = learnt ? Generator(s, how, t.spec == "off" ? nullptr : o.proposer, *learnt)
                         : Generator(s, how, t.spec == "off" ? nullptr : o.proposer, o.draft_length);
    std::vector<int32_t> ctx;
    if (!o.context.empty()) {  // the context is in the cache but its last token: start() runs that one
      ctx = o.context;
      s.truncate(0, s.n_past() - 1);
    } else {  // -d's random tokens (the proposer sees placeholders), then a random one
      ctx.assign(size_t(s.n_past()), 0);
      ctx.push_back(src.take(1, s.n_past() == 0)[0]);
    }
    int got = 1;
    g.start(ctx, size_t(s.n_past()));
    while (got < n) got += int(g.next(n - got).size());
    g.finish();
    learnt = g.draft_length();
    return g.stats();
  };
  auto prompt = [&] {
    if (t.n_parallel > 1 && t.n_prompt > 0) run_prompt_parallel(s, src, t.n_prompt, t.n_parallel, int(sp.n_batch));
    else run_prompt(s, src, t.n_prompt);
  };
  auto gen = [&](int n) {
    if (!t.spec.empty()) {
      const SpecStats st = gen_spec(n);
      spec_total.tokens += st.tokens, spec_total.steps += st.steps;
      spec_total.drafted += st.drafted, spec_total.accepted += st.accepted;
    } else if (grammar) run_gen_grammar(s, src, *grammar, n);
    else if (parallel) run_gen_parallel(s, src, n, t.n_parallel);
    else run_gen(s, src, n, o.pipelined);
  };
  if (o.warmup && !t.spec.empty()) {  // every step shape the run takes, built
    if (!o.context.empty()) s.eval(o.context);
    gen(t.n_gen);
  } else if (o.warmup) {
    prompt();
    if (t.n_gen > 0) gen(1);
  }
  spec_total = {};
  for (int rep = 0; rep < o.reps; ++rep) {
    s.reset();
    if (parallel) run_depth_parallel(s, src, t.n_depth, t.n_parallel);
    else if (!o.context.empty() && t.n_gen > 0 && t.n_prompt == 0) s.eval(o.context);  // untimed context: the text
    else run_prompt(s, src, t.n_depth);  // untimed context
    const auto t0 = std::chrono::steady_clock::now();
    prompt();
    if (t.n_gen > 0) gen(t.n_gen);
    r.samples_ns.push_back(uint64_t(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count()));
  }
  r.spec_acceptance = spec_total.acceptance();
  r.spec_tokens_per_step = spec_total.tokens_per_step();
  return r;
}

double VerifyCurve::speedup(int k, double a) const {
  if (k < 0 || size_t(k) >= step_ms.size() || step_ms[size_t(k)] <= 0) return 0;
  return DraftLength::expected_tokens(a, k) * plain_ms / step_ms[size_t(k)];
}

int VerifyCurve::best_k(double a) const {
  int best = 0;
  for (int k = 1; size_t(k) < step_ms.size(); ++k)
    if (speedup(k, a) > speedup(best, a)) best = k;
  return best;
}

VerifyCurve measure_verify_curve(const Model& model, Backend& backend, int k_max, int depth, const BenchRunOptions& o) {
  if (k_max < 1 || k_max > DraftLength::kMaxDraft) throw Error("bench: the verify curve's k must be 1 to 64");
  VerifyCurve c;
  c.depth = depth;
  const int reps = std::max(3, o.reps);
  const int plain = 32;
  SessionParams sp;
  // Each step keeps its first token (random guesses are refused).
  sp.n_ctx = int64_t(depth) + int64_t(k_max + 2) * (reps + 2) + plain + 2 * (k_max + 1) + 64;
  sp.n_batch = k_max + 1;
  sp.max_graphs = kSpecGraphs;
  sp.kv_type = o.kv_type;
  sp.stop = o.stop;
  sp.tp = o.tp;
  sp.peers = o.peers;
  Session s(model, backend, sp);
  TokenSource src(model, o.seed);
  run_prompt(s, src, depth);
  BackendSampling greedy;
  greedy.temperature = 0;
  int32_t last = src.take(1, s.n_past() == 0)[0];
  for (int k = 0; k <= k_max; ++k) {  // warm-up: every step shape built
    const std::vector<int32_t> g = src.take(k, false);
    const DraftVerdict d = s.eval_guesses(last, g, greedy);
    last = d.next;
  }
  c.step_ms.assign(size_t(k_max) + 1, 0);
  for (int k = 0; k <= k_max; ++k) {
    std::vector<double> ms;
    for (int r = 0; r < reps; ++r) {
      const std::vector<int32_t> g = src.take(k, false);
      const auto t0 = std::chrono::steady_clock::now();
      const DraftVerdict d = s.eval_guesses(last, g, greedy);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      last = d.next;
    }
    std::sort(ms.begin(), ms.end());
    c.step_ms[size_t(k)] = ms[ms.size() / 2];
  }
  // Plain decoding beside it, as tg runs it (pipelined where it samples on the backend).
  s.truncate(0, depth);
  const auto t0 = std::chrono::steady_clock::now();
  run_gen(s, src, plain, o.pipelined);
  c.plain_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / plain;
  return c;
}

}  // namespace weir
