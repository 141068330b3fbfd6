// Tensor parallelism on the CPU: ranks are threads of this process, each a
// CPU backend with its share of the heads, FFN and vocab (model/shard.h),
// their collectives and the logits' all-gather through the thread comm.
// With the row-parallel products as partial sums (the GPU's form) and the
// CPU's llama.cpp rounding off, the logits must equal one rank's (--tp 1)
// within float tolerance (the partial sums add in another order); with
// whole rows (the CPU's form) and the rounding on (the default), bit for
// bit, quantized models included. Both for every architecture, in prefill,
// decode and batched decode of several sequences; the ranks sample the same
// tokens; a rank that fails or hangs stops the others with an error, not a
// hang.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "comm/thread_comm.h"
#include "engine/session.h"
#include "model/model.h"
#include "model/shard.h"
#include "model/synth.h"
#include "model/tiny_models.h"

namespace weir {
namespace {

// How the ranks compute: the CPU's llama.cpp activation rounding on or off,
// the row-parallel products' form (core/collective.h).
struct Form {
  bool rounding = false;  // the float path: only the order of the partial sums differs
  RowParallel rows = RowParallel::PartialSums;
};
// The CPU's production form: rounding on, whole rows.
constexpr Form kCpuForm{true, RowParallel::WholeRows};

// A group of n CPU ranks.
struct Group {
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<std::unique_ptr<Collective>> comms;
  RowParallel rows = RowParallel::PartialSums;
  SessionParams params(SessionParams p) const {
    p.tp = {0, int(comms.size()), comms.empty() ? nullptr : comms[0].get(), rows};
    for (size_t r = 1; r < comms.size(); ++r) p.peers.push_back({backends[r].get(), comms[r].get()});
    return p;
  }
};

Group make_group(int n, CommOptions o = {}, Form f = {}) {
  Group g;
  CpuOptions cpu;
  cpu.llama_rounding = f.rounding;
  for (int r = 0; r < n; ++r) g.backends.push_back(std::make_unique<CpuBackend>(1, cpu));
  if (n > 1) g.comms = make_thread_comms(n, o);
  g.rows = f.rows;
  return g;
}

double rel_error(const float* a, const float* b, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return diff / scale;
}

// The logits that differ in any bit, with the first one's place and values.
::testing::AssertionResult bit_equal(const std::vector<float>& got, const std::vector<float>& want, int64_t V) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << got.size() << " logits, want " << want.size();
  size_t n = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && n++ == 0) first = i;
  if (n == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << n << " of " << got.size() << " logits differ; the first: row "
                                       << first / size_t(V) << " id " << first % size_t(V) << ": " << got[first]
                                       << ", want " << want[first];
}

// Prompt logits of every row, then decode steps: all rows, one vector.
std::vector<float> run(const Model& m, int tp, Form f = {}) {
  Group g = make_group(tp, {}, f);
  SessionParams sp;
  sp.n_ctx = 64;
  sp.n_batch = 6;
  Session s(m, *g.backends[0], g.params(sp));
  const std::vector<int32_t> prompt = {1, 5, 9, 2, 7, 3, 11, 4, 8};
  std::vector<int32_t> rows(prompt.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = int32_t(i);
  s.eval(prompt, rows);
  std::vector<float> out;
  for (size_t t = 0; t < prompt.size(); ++t) out.insert(out.end(), s.logits(t), s.logits(t) + s.n_vocab());
  for (int32_t id : {6, 10, 12}) {
    const int32_t one[1] = {id};
    s.eval(one);
    out.insert(out.end(), s.logits(), s.logits() + s.n_vocab());
  }
  return out;
}

class TensorParallel : public ::testing::TestWithParam<const char*> {};

TEST_P(TensorParallel, LogitsEqualOneRank) {
  const std::string name = GetParam();
  WEIR_TINY_MODEL(dir, name, "tp");
  auto model = Model::load(dir + "/" + name + ".gguf");
  const int64_t V = model->hparams().n_vocab;
  const std::vector<float> want = run(*model, 1);
  for (int tp : {2, 4}) {
    const std::vector<float> got = run(*model, tp);
    ASSERT_EQ(got.size(), want.size());
    for (size_t row = 0; row * size_t(V) < want.size(); ++row)
      EXPECT_LT(rel_error(&got[row * size_t(V)], &want[row * size_t(V)], V), 1e-5)
          << name << " --tp " << tp << " row " << row;
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, TensorParallel,
                         ::testing::Values("llama3", "llama-partial-linear", "qwen2", "qwen3", "gemma3", "phi3",
                                           "phi3-split", "gemma2"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// Whole rows with the llama.cpp rounding on: bit for bit, also for the
// quantized models (Q4_0 and Q8_0 weights: x rounded to Q8_0 blocks), at 2
// and 4 ranks. llama3-q4_0's FFN (96 columns) and its attention output at
// 4 ranks (16 columns a rank) do not split on whole Q4_0 blocks: partial
// sums refuse them, whole rows need no such split.
class TensorParallelWholeRows : public ::testing::TestWithParam<const char*> {};

TEST_P(TensorParallelWholeRows, LogitsEqualOneRankBitForBit) {
  const std::string name = GetParam();
  WEIR_TINY_MODEL(dir, name, "tp-whole");
  auto model = Model::load(dir + "/" + name + ".gguf");
  const int64_t V = model->hparams().n_vocab;
  const std::vector<float> want = run(*model, 1, kCpuForm);
  for (int tp : {2, 4}) EXPECT_TRUE(bit_equal(run(*model, tp, kCpuForm), want, V)) << name << " --tp " << tp;
}

INSTANTIATE_TEST_SUITE_P(Tiny, TensorParallelWholeRows,
                         ::testing::Values("llama3", "llama-partial-linear", "qwen2", "qwen3", "gemma3", "llama3-q4_0",
                                           "qwen2-q8_0", "phi3", "phi3-split", "gemma2"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// weir synth's tiny preset of an architecture, quantized as `type`
// (Q8_0: x rounded to Q8_0 blocks; Q4_K_M: Q4_K and Q6_K weights, x to
// Q8_K blocks of 256), or with the shape changed by `edit`.
std::unique_ptr<Model> synth_model(const std::string& arch, FileType type, const std::string& tag,
                                   void (*edit)(SynthPreset&) = nullptr) {
  SynthPreset p = find_synth_preset(arch, "tiny");
  if (edit) edit(p);
  const std::string path = test::own_dir() + "/" + tag + "-" + arch + "-" + file_type_name(type) + ".gguf";
  SynthOptions o;
  o.file_type = type;
  o.threads = 2;
  o.sync = false;
  write_synth_model(p, o, path);
  return Model::load(path);
}

// Every architecture's tiny synth model, quantized: whole rows with the
// rounding on equal one rank bit for bit at 2 and 4 ranks. The rounding is
// at work (one rank's logits change when it is off), so a last-bit
// difference between the ranks' inputs would show.
class TensorParallelQuantized : public ::testing::TestWithParam<std::tuple<const char*, FileType>> {};

TEST_P(TensorParallelQuantized, WholeRowsEqualOneRankBitForBit) {
  const std::string arch = std::get<0>(GetParam());
  const FileType type = std::get<1>(GetParam());
  auto model = synth_model(arch, type, "tp");
  const int64_t V = model->hparams().n_vocab;
  const std::vector<float> want = run(*model, 1, kCpuForm);
  EXPECT_FALSE(bit_equal(run(*model, 1, Form{}), want, V)) << "the rounding changes nothing: the test tests nothing";
  for (int tp : {2, 4})
    EXPECT_TRUE(bit_equal(run(*model, tp, kCpuForm), want, V)) << arch << " " << file_type_name(type) << " --tp " << tp;
}

INSTANTIATE_TEST_SUITE_P(Synth, TensorParallelQuantized,
                         ::testing::Combine(::testing::Values("llama", "qwen2", "qwen3", "gemma3", "phi3", "gemma2"),
                                            ::testing::Values(FileType::Q8_0, FileType::Q4_K_M)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) + "_" + file_type_name(std::get<1>(info.param));
                         });

// Uneven splits: n_embd 250 (output rows 125/125 at 2 ranks, 63/63/62/62
// at 4) and an FFN of 102 columns (51/51, 26/26/25/25), F16 weights (x
// rounded to halves): the gathers place every part; bit for bit.
TEST(TensorParallelUneven, WholeRowsEqualOneRankBitForBit) {
  auto model = synth_model("llama", FileType::MOSTLY_F16, "tp-uneven", [](SynthPreset& p) {
    p.n_embd = 250;
    p.n_ff = 102;
  });
  const int64_t V = model->hparams().n_vocab;
  const std::vector<float> want = run(*model, 1, kCpuForm);
  EXPECT_FALSE(bit_equal(run(*model, 1, Form{}), want, V)) << "the rounding changes nothing: the test tests nothing";
  for (int tp : {2, 4}) EXPECT_TRUE(bit_equal(run(*model, tp, kCpuForm), want, V)) << "--tp " << tp;
}

// What each rank loads (rank_weight_items, read from its graph) follows the
// form: with whole rows, a rank's part of the attention output and the FFN
// down is one run of whole rows, and the ranks' runs tile the weight.
TEST(TensorParallelWeights, WholeRowsLoadRowsOfWoAndDown) {
  auto model = synth_model("llama", FileType::Q4_K_M, "tp-items");
  for (int n : {2, 4}) {
    auto comms = make_thread_comms(n);
    CpuBackend cpu(1, CpuOptions{});
    std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> runs;  // tensor -> [begin, end) of each rank
    for (int r = 0; r < n; ++r) {
      const weir::TensorParallel tp{r, n, comms[size_t(r)].get(), RowParallel::WholeRows};  // not the fixture above
      for (const LoadItem& it : rank_weight_items(*model, tp, &cpu)) {
        const GGUFTensorInfo& t = model->file().tensors()[it.tensor];
        const std::string name(t.name);
        if (name.find("attn_output") == std::string::npos && name.find("ffn_down") == std::string::npos) continue;
        EXPECT_EQ(it.rows, 0u) << name << " rank " << r << ": a strided part";
        runs[name].push_back({it.begin, it.end ? it.end : t.nbytes});
      }
    }
    EXPECT_EQ(runs.size(), 2 * size_t(model->hparams().n_layer));
    for (auto& [name, parts] : runs) {
      ASSERT_EQ(parts.size(), size_t(n)) << name;
      std::sort(parts.begin(), parts.end());
      uint64_t at = 0;
      for (const auto& [b, e] : parts) {
        EXPECT_EQ(b, at) << name;
        at = e;
      }
      EXPECT_EQ(at, model->file().find_tensor(name)->nbytes) << name;
    }
  }
}

// Greedy tokens of several sequences decoded together, sampled on the
// backend, in form f.
std::vector<int32_t> batched_tokens(const Model& m, int tp, Form f) {
  Group g = make_group(tp, {}, f);
  SessionParams sp;
  sp.n_ctx = 128;
  sp.n_seq = 4;
  Session s(m, *g.backends[0], g.params(sp));
  BackendSampling greedy;
  greedy.temperature = 0;
  const std::vector<int32_t> seqs = {0, 1, 2, 3};
  std::vector<int32_t> cur = {3, 5, 7, 9}, all;
  for (int32_t q = 1; q < 4; ++q) s.fill(q, std::vector<int32_t>{2, int32_t(q)});
  for (int step = 0; step < 6; ++step) {
    cur = s.decode_sample(cur, seqs, greedy);
    all.insert(all.end(), cur.begin(), cur.end());
  }
  return all;
}

// Several sequences decoded together, sampling on the backend: the ranks
// sample the same tokens (Session checks), and greedy tokens equal one
// rank's.
TEST(TensorParallelDecode, BatchedSequencesSampleTheSameTokens) {
  WEIR_TINY_MODEL(dir, "qwen2", "tp-batched");
  auto model = Model::load(dir + "/qwen2.gguf");
  auto tokens = [&](int tp) { return batched_tokens(*model, tp, Form{}); };
  EXPECT_EQ(tokens(2), tokens(1));
  EXPECT_EQ(tokens(4), tokens(1));
  EXPECT_EQ(tokens(8), tokens(1));  // a query head a rank, each kv head on four ranks
}

// The same with whole rows and a Q8_0 model, the rounding on.
TEST(TensorParallelDecode, WholeRowsBatchedSequencesSampleTheSameTokens) {
  WEIR_TINY_MODEL(dir, "qwen2-q8_0", "tp-batched-whole");
  auto model = Model::load(dir + "/qwen2-q8_0.gguf");
  const std::vector<int32_t> want = batched_tokens(*model, 1, kCpuForm);
  for (int tp : {2, 4, 8}) EXPECT_EQ(batched_tokens(*model, tp, kCpuForm), want) << "--tp " << tp;
}

// Eight CPU ranks (issue 29's collective at 8 ranks, without 8 GPUs): the
// tiny Qwen2 has 8 query heads and 2 kv heads, so each rank takes one query
// head and a copy of its kv head; logits equal one rank's.
TEST(TensorParallelDecode, EightRanksMatchOne) {
  WEIR_TINY_MODEL(dir, "qwen2", "tp-eight");
  auto model = Model::load(dir + "/qwen2.gguf");
  const int64_t V = model->hparams().n_vocab;
  const std::vector<float> want = run(*model, 1), got = run(*model, 8);
  ASSERT_EQ(got.size(), want.size());
  for (size_t row = 0; row * size_t(V) < want.size(); ++row)
    EXPECT_LT(rel_error(&got[row * size_t(V)], &want[row * size_t(V)], V), 1e-5) << "--tp 8 row " << row;
}

// The real Gemma 3 270M (Q4_K_M; its outlier features make the rounding's
// quanta large, so one flipped rounding used to grow to 9% of the largest
// logit) on two CPU ranks in the CPU's form equals one rank: 32 greedy
// tokens, and the logits of every row of 128 tokens of the perplexity text
// (two steps of 64, as a perplexity chunk is fed).
TEST(TensorParallelRealModel, GemmaTwoRanksEqualOne) {
  WEIR_REQUIRE_MODEL(path);
  auto model = Model::load(path);
  const int64_t V = model->hparams().n_vocab;
  const std::vector<int32_t> prompt = model->tokenizer().encode("The first ten prime numbers are", true, false);
  auto greedy = [&](int tp) {
    Group g = make_group(tp, {}, kCpuForm);
    SessionParams sp;
    sp.n_ctx = 64;
    Session s(*model, *g.backends[0], g.params(sp));
    BackendSampling greedy;
    greedy.temperature = 0;
    std::vector<int32_t> out = {s.eval_sample(prompt, greedy)};
    while (out.size() < 32) {
      const int32_t t[1] = {out.back()};
      out.push_back(s.eval_sample(t, greedy));
    }
    return out;
  };
  EXPECT_EQ(greedy(2), greedy(1));

  std::ifstream in(test::ref_dir() + "/ppl-text.txt", std::ios::binary);
  if (!in) GTEST_SKIP() << "no " << test::ref_dir() << "/ppl-text.txt";
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<int32_t> chunk = model->tokenizer().encode(text.substr(0, 2000), true, false);
  ASSERT_GE(chunk.size(), 128u);
  chunk.resize(128);
  auto logits = [&](int tp) {
    Group g = make_group(tp, {}, kCpuForm);
    SessionParams sp;
    sp.n_ctx = 128;
    sp.n_batch = 64;
    Session s(*model, *g.backends[0], g.params(sp));
    std::vector<int32_t> rows(chunk.size());
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = int32_t(i);
    s.eval(chunk, rows);
    return std::vector<float>(s.logits(0), s.logits(0) + chunk.size() * size_t(V));
  };
  EXPECT_TRUE(bit_equal(logits(2), logits(1), V));
}

// A model whose FFN does not split on whole blocks: an error naming the
// numbers, at the first step.
TEST(TensorParallelDecode, UnevenSplitIsAClearError) {
  WEIR_TINY_MODEL(dir, "llama3-q4_0", "tp-uneven");
  auto model = Model::load(dir + "/llama3-q4_0.gguf");
  Group g = make_group(2);
  Session s(*model, *g.backends[0], g.params(SessionParams{}));
  try {
    s.eval(std::vector<int32_t>{1, 2, 3});
    FAIL() << "a Q4_0 FFN of 96 columns split in 2";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--tp 2"), std::string::npos) << m;
    EXPECT_NE(m.find("96"), std::string::npos) << m;
  }
  // What the tools check first: the same refusal; whole rows take any split.
  EXPECT_THROW(check_tensor_parallel(model->hparams(), DType::Q4_0, DType::Q4_0, 2), Error);
  EXPECT_NO_THROW(check_tensor_parallel(model->hparams(), DType::Q4_0, DType::Q4_0, 2, RowParallel::WholeRows));
}

// A backend whose graph runs fail (or hang) from the n-th on: one rank of
// a group that dies mid-run.
class FaultyBackend final : public Backend {
 public:
  FaultyBackend(int fail_at, int hang_ms) : inner_(1, CpuOptions{}), queue_(*this), fail_at_(fail_at), hang_ms_(hang_ms) {}
  std::string name() const override { return "faulty"; }
  Device device() const override { return inner_.device(); }
  bool supports(const Tensor& n) const override { return inner_.supports(n); }
  bool host_visible_memory() const override { return true; }
  Queue& queue() override { return queue_; }
  Queue& copy_queue() override { return inner_.copy_queue(); }
  bool owns(const void* p) const override { return inner_.owns(p); }
  void plan(Graph& g) override { inner_.plan(g); }
  size_t planned_bytes(const Graph& g) const override { return inner_.planned_bytes(g); }
  void release(const Graph& g) override { inner_.release(g); }
  const BackendStats& stats() const override { return inner_.stats(); }
  std::unique_ptr<Buffer> alloc(size_t n) override { return inner_.alloc(n); }
  std::unique_ptr<Buffer> alloc_host(size_t n) override { return inner_.alloc_host(n); }

 private:
  class FaultyQueue final : public Queue {
   public:
    explicit FaultyQueue(FaultyBackend& b) : b_(b) {}
    void run(Graph& g) override {
      if (++b_.runs_ >= b_.fail_at_) {
        if (b_.hang_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(b_.hang_ms_));
        else throw Error("injected failure");
      }
      b_.inner_.queue().run(g);
    }
    void copy_to_device(void* d, const void* s, size_t n) override { b_.inner_.queue().copy_to_device(d, s, n); }
    void copy_to_host(void* d, const void* s, size_t n) override { b_.inner_.queue().copy_to_host(d, s, n); }
    void copy_on_device(void* d, const void* s, size_t n) override { b_.inner_.queue().copy_on_device(d, s, n); }
    std::unique_ptr<Event> record() override { return b_.inner_.queue().record(); }
    void wait_event(Event& e) override { b_.inner_.queue().wait_event(e); }
    void synchronize() override { b_.inner_.queue().synchronize(); }

   private:
    FaultyBackend& b_;
  };
  CpuBackend inner_;
  FaultyQueue queue_;
  int fail_at_, hang_ms_;
  int runs_ = 0;
};

TEST(TensorParallelFailure, ARankThatFailsStopsTheOthers) {
  WEIR_TINY_MODEL(dir, "llama3", "tp-fail");
  auto model = Model::load(dir + "/llama3.gguf");
  Group g = make_group(4);
  g.backends[2] = std::make_unique<FaultyBackend>(3, 0);  // rank 2's third graph run throws
  Session s(*model, *g.backends[0], g.params(SessionParams{}));
  s.eval(std::vector<int32_t>{1, 2, 3});
  const int32_t one[1] = {4};
  s.eval(one);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    s.eval(one);
    FAIL() << "the failing rank went unnoticed";
  } catch (const CommError& e) {
    FAIL() << "the cause was hidden behind the others' CommError: " << e.what();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("injected failure"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  // The group is done: later calls fail at once instead of hanging.
  EXPECT_THROW(s.eval(one), Error);
}

TEST(TensorParallelFailure, ARankThatHangsTimesOut) {
  WEIR_TINY_MODEL(dir, "llama3", "tp-hang");
  auto model = Model::load(dir + "/llama3.gguf");
  CommOptions o;
  o.timeout_ms = 300;
  Group g = make_group(2, o);
  g.backends[1] = std::make_unique<FaultyBackend>(2, 1500);  // its second run stalls 1.5 s
  Session s(*model, *g.backends[0], g.params(SessionParams{}));
  s.eval(std::vector<int32_t>{1, 2, 3});
  const auto t0 = std::chrono::steady_clock::now();
  const int32_t one[1] = {4};
  EXPECT_THROW(s.eval(one), CommError);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

}  // namespace
}  // namespace weir
