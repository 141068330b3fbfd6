// The CUDA sample op against the plain reference (tests/sample_reference.h),
// token for token. Draws use u at the middle of the interval of the token
// the reference picks (computed from the reference's kept set, re-derived
// below), so a comparison is never at a rounding boundary of the weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <functional>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "sample_reference.h"
#include "backend/cuda/cuda_ops.h"
#include "core/error.h"
#include "core/tensor.h"
#include "cuda_test_util.h"
#include "sample_test_util.h"

namespace weir::cuda {
namespace {

using namespace test;  // NOLINT: the helpers of sample_test_util.h

// ---- the reference's kept set, in draw order (a copy of its chain) ----
struct Entry {
  int32_t id;
  float w;
};
std::vector<Entry> draw_list(const float* logits, int64_t V, const Params& p) {
  struct Cand {
    int32_t id;
    float logit;
  };
  auto before = [](const Cand& a, const Cand& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); };
  auto sanitize = [](float v) { return !(v <= FLT_MAX) ? (std::isnan(v) ? -kInf : FLT_MAX) : v; };
  if (p.temp <= 0) return {};
  const int64_t top_k = int64_t(p.top_k);
  std::vector<Cand> c(static_cast<size_t>(V));
  float max_l = -kInf;
  for (int64_t i = 0; i < V; ++i) {
    c[size_t(i)] = {int32_t(i), sanitize(logits[i])};
    max_l = std::max(max_l, c[size_t(i)].logit);
  }
  if (max_l == -kInf) return {};
  size_t n = size_t(V);
  bool sorted = false;
  if (top_k > 0 && top_k < V) {
    std::partial_sort(c.begin(), c.begin() + top_k, c.end(), before);
    n = size_t(top_k);
    sorted = true;
  }
  const bool use_top_p = p.top_p < 1.0f;
  double norm = 0;
  if (use_top_p)
    for (size_t i = 0; i < n; ++i) norm += double(std::exp(c[i].logit - max_l));
  if (p.min_p > 0) {
    const float thr = max_l + std::log(p.min_p);
    size_t m = 0;
    for (size_t i = 0; i < n; ++i)
      if (c[i].logit >= thr) c[m++] = c[i];
    n = m;
  }
  if (use_top_p) {
    if (!sorted) std::sort(c.begin(), c.begin() + std::ptrdiff_t(n), before);
    double cum = 0;
    for (size_t i = 0; i < n; ++i) {
      cum += double(std::exp(c[i].logit - max_l)) / norm;
      if (cum >= p.top_p) {
        n = i + 1;
        break;
      }
    }
  }
  std::vector<Entry> out(n);
  const float inv_t = 1.0f / p.temp;
  for (size_t i = 0; i < n; ++i)
    out[i] = {c[i].id, p.temp == 1.0f ? std::exp(c[i].logit - max_l) : std::exp((c[i].logit - max_l) * inv_t)};
  return out;
}

// u at the middle of the interval of the entry holding quantile q of the
// weight (or of a neighbour wide enough to hit safely).
float mid_u(const std::vector<Entry>& L, double q) {
  if (L.empty()) return 0.5f;
  double total = 0;
  for (const Entry& e : L) total += double(e.w);
  std::vector<double> before(L.size());
  double cum = 0;
  size_t at = L.size();
  for (size_t i = 0; i < L.size(); ++i) {
    before[i] = cum;
    cum += double(L[i].w);
    if (at == L.size() && L[i].w > 0 && q * total < cum) at = i;
  }
  auto wide = [&](size_t i) { return L[i].w > 0 && double(L[i].w) / total >= 1e-6; };
  if (at == L.size()) at = L.size() - 1;
  if (!wide(at)) {
    size_t j = at;
    while (j < L.size() && !wide(j)) ++j;
    if (j == L.size()) {
      j = at;
      while (j > 0 && !wide(j)) --j;
    }
    at = j;
  }
  return float((before[at] + 0.5 * double(L[at].w)) / total);
}

// Top-p runs on the GPU's 1024 best tokens only (top-k off or above 1024).
bool capped(const Params& p, int64_t V) {
  const int64_t k = int64_t(p.top_k);
  return p.temp > 0 && p.top_p < 1.0f && !(k > 0 && k < V && k <= 1024);
}

// Each sampling row's u (holding a quantile in [0, 1)) becomes the middle of
// the interval of the reference's token at that quantile. Rows where the
// GPU's top-p cap could matter must have a nucleus within it.
void snap_u(const Logits& l, std::vector<Params>& p) {
  for (int64_t r = 0; r < l.n; ++r) {
    Params& q = p[size_t(r)];
    const std::vector<Entry> L = draw_list(l.row(r), l.V, q);
    if (capped(q, l.V)) {
      ASSERT_LE(L.size(), 1024u) << "test setup: the nucleus outgrows the GPU's cap; row " << r << ": " << str(q);
    }
    q.u = mid_u(L, q.u);
  }
}

// The GPU's tokens equal the reference's, row for row.
void expect_same(const Logits& l, std::vector<Params> p, bool snap = true) {
  ASSERT_EQ(int64_t(p.size()), l.n);
  if (snap) {
    snap_u(l, p);
    if (::testing::Test::HasFatalFailure()) return;
  }
  const std::vector<int32_t> got = gpu_sample(l, p);
  for (int64_t r = 0; r < l.n; ++r) {
    const int32_t want = weir::test::reference_sample_row(l.row(r), l.V, &p[size_t(r)].temp);
    EXPECT_EQ(got[size_t(r)], want) << "V " << l.V << " n " << l.n << " row " << r << ": " << str(p[size_t(r)]);
  }
}

std::vector<Params> rows_of(int64_t n, const std::vector<Params>& kinds) {
  std::vector<Params> p(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    p[size_t(r)] = kinds[size_t(r) % kinds.size()];
    p[size_t(r)].u = float((double(r) + 0.5) / double(n));  // a quantile, snapped later
  }
  return p;
}

const int64_t kSizes[] = {1, 7, 1000, 32000, 262144};

TEST(CudaSample, Greedy) {
  WEIR_REQUIRE_GPU();
  for (int64_t V : kSizes)
    for (int64_t n : {1, 3, 64}) {
      SCOPED_TRACE("V " + std::to_string(V) + " n " + std::to_string(n));
      const Logits l = spread(V, n, uint64_t(V * 100 + n));
      expect_same(l, rows_of(n, {{0, 0, 1, 0}, {-1, 40, 0.9f, 0.05f}, {0, 1, 1, 0}}));
    }
}

TEST(CudaSample, TemperatureOnly) {
  WEIR_REQUIRE_GPU();
  for (int64_t V : kSizes)
    for (int64_t n : {1, 3, 64}) {
      if (V == 262144 && n == 64) continue;  // below, with fewer reference calls
      SCOPED_TRACE("V " + std::to_string(V) + " n " + std::to_string(n));
      const Logits l = spread(V, n, uint64_t(V * 7 + n));
      // top_k >= V and top_k <= 0 are both off.
      expect_same(l, rows_of(n, {{0.5f, 0, 1, 0}, {1, 0, 1, 0}, {1.7f, float(V), 1, 0}, {1, -3, 1, 0}}));
    }
  expect_same(peaked(262144, 24, 5), rows_of(24, {{0.5f, 0, 1, 0}, {1, 0, 1, 0}, {1.7f, 0, 1, 0}}));
}

TEST(CudaSample, TopK) {
  WEIR_REQUIRE_GPU();
  for (int64_t V : {int64_t(7), int64_t(1000), int64_t(32000), int64_t(262144)}) {
    SCOPED_TRACE("V " + std::to_string(V));
    std::vector<Params> kinds;
    for (float k : {1.0f, 2.0f, 40.0f, 1000.0f, float(V), float(V + 3), 40.9f})
      for (float t : {0.7f, 1.0f, 1.7f}) kinds.push_back({t, k, 1, 0});
    const int64_t n = V == 262144 ? 21 : 63;
    expect_same(spread(V, n, uint64_t(V + 1)), rows_of(n, kinds));
    expect_same(peaked(V, n, uint64_t(V + 2)), rows_of(n, kinds));
  }
}

TEST(CudaSample, TopPWithTopK) {
  WEIR_REQUIRE_GPU();
  for (int64_t V : {int64_t(1000), int64_t(32000), int64_t(262144)}) {
    SCOPED_TRACE("V " + std::to_string(V));
    std::vector<Params> kinds;
    for (float p : {0.5f, 0.9f, 0.95f})
      for (float t : {0.8f, 1.0f, 1.3f}) kinds.push_back({t, 40, p, 0});
    kinds.push_back({1, 1000, 0.9f, 0});
    kinds.push_back({1, 2, 0.5f, 0});
    expect_same(spread(V, 33, uint64_t(V + 3)), rows_of(33, kinds));
    expect_same(peaked(V, 33, uint64_t(V + 4)), rows_of(33, kinds));
  }
}

TEST(CudaSample, MinP) {
  WEIR_REQUIRE_GPU();
  for (int64_t V : {int64_t(7), int64_t(1000), int64_t(32000), int64_t(262144)}) {
    SCOPED_TRACE("V " + std::to_string(V));
    const std::vector<Params> kinds = {{1, 0, 1, 0.05f},  {0.7f, 0, 1, 0.05f}, {1.5f, 0, 1, 0.2f},
                                       {1, 40, 1, 0.05f}, {0.8f, 40, 1, 0.5f}, {1, 1000, 1, 0.05f},
                                       {1, 0, 1, 1.0f},   {1, 40, 1, 1.5f},    {1, 0, 1, 1.5f}};
    const int64_t n = V == 262144 ? 18 : 36;
    expect_same(spread(V, n, uint64_t(V + 5)), rows_of(n, kinds));
    expect_same(peaked(V, n, uint64_t(V + 6)), rows_of(n, kinds));
  }
}

TEST(CudaSample, CliDefaults) {
  WEIR_REQUIRE_GPU();
  for (int64_t V : {int64_t(1000), int64_t(32000), int64_t(262144)}) {
    SCOPED_TRACE("V " + std::to_string(V));
    const std::vector<Params> kinds = {{0.8f, 40, 0.95f, 0.05f}};
    const int64_t n = V == 262144 ? 32 : 64;
    expect_same(spread(V, n, uint64_t(V + 7)), rows_of(n, kinds));
    expect_same(peaked(V, n, uint64_t(V + 8)), rows_of(n, kinds));
  }
}

// Top-p without top-k: exact while the nucleus fits in 1024 tokens.
TEST(CudaSample, TopPWithoutTopK) {
  WEIR_REQUIRE_GPU();
  for (int64_t V : {int64_t(7), int64_t(1000), int64_t(32000), int64_t(262144)}) {
    SCOPED_TRACE("V " + std::to_string(V));
    std::vector<Params> kinds;
    for (float p : {0.5f, 0.9f, 0.95f})
      for (float k : {0.0f, -1.0f, float(V), float(V + 10)}) kinds.push_back({p == 0.9f ? 0.8f : 1.0f, k, p, 0});
    kinds.push_back({1, 0, 0.95f, 0.05f});
    kinds.push_back({0.7f, 0, 0.9f, 0.01f});
    const int64_t n = V == 262144 ? 7 : int64_t(kinds.size());
    for (const Logits& l : {peaked(V, n, uint64_t(V + 9)), broad(V, n, uint64_t(V + 19))}) {
      expect_same(l, rows_of(n, kinds));  // checks that each nucleus fits in 1024
    }
  }
  // 1024 < top_k < V with top-p counts as top-k off; with no mass beyond
  // the 2000 best tokens both normalizers agree.
  Logits l = peaked(32000, 4, 10);
  for (int64_t r = 0; r < l.n; ++r) {
    std::vector<float> s(l.row(r), l.row(r) + l.V);
    std::nth_element(s.begin(), s.begin() + 1999, s.end(), std::greater<float>());
    for (int64_t i = 0; i < l.V; ++i)
      if (l.row(r)[i] < s[1999]) l.row(r)[i] = -kInf;
  }
  expect_same(l, rows_of(4, {{1, 5000, 0.9f, 0}, {0.8f, 1500, 0.95f, 0.05f}}));
}

// 1024 < top_k < V without top-p: the exact slow path.
TEST(CudaSample, LargeTopK) {
  WEIR_REQUIRE_GPU();
  const std::vector<Params> kinds = {{1, 1025, 1, 0},     {0.7f, 5000, 1, 0}, {1.3f, 31999, 1, 0},
                                     {1, 5000, 1, 0.05f}, {1, 2000, 1, 0.5f}, {2.0f, 20000, 1, 0}};
  expect_same(spread(32000, 12, 11), rows_of(12, kinds));
  expect_same(peaked(32000, 12, 12), rows_of(12, kinds));
  expect_same(spread(262144, 2, 13), rows_of(2, {{1, 2000, 1, 0}, {0.9f, 100000, 1, 0.01f}}));
}

TEST(CudaSample, Ties) {
  WEIR_REQUIRE_GPU();
  // Equal maxima: the lowest id wins greedy; across chunks too.
  {
    Logits l = spread(32000, 2, 14);
    for (int64_t r = 0; r < 2; ++r)
      for (int32_t id : {20000, 9000, 8191 + int32_t(r), 31999}) l.row(r)[id] = 50.0f;
    expect_same(l, rows_of(2, {{0, 0, 1, 0}}));
    expect_same(l, rows_of(2, {{1, 1, 1, 0}}));  // top-k 1: the same token
    expect_same(l, rows_of(2, {{1, 3, 1, 0}, {1, 2, 0.9f, 0}}));
  }
  // Ties at the top-k boundary: the lowest ids win.
  for (int64_t V : {int64_t(1000), int64_t(32000)}) {
    Logits l = spread(V, 8, uint64_t(V + 15));
    std::mt19937_64 rng(static_cast<uint64_t>(V));
    for (int64_t r = 0; r < l.n; ++r) {
      std::vector<int32_t> ids(static_cast<size_t>(V));
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      l.row(r)[ids[0]] = 30, l.row(r)[ids[1]] = 29, l.row(r)[ids[2]] = 28;
      for (int i = 3; i < 15; ++i) l.row(r)[ids[size_t(i)]] = 20;  // 12 tied below three distinct
    }
    expect_same(l, rows_of(8, {{1, 6, 1, 0}, {1, 3, 1, 0}, {1, 10, 0.99f, 0}, {0.5f, 15, 1, 0}}));
  }
  // A constant row: every token ties; probability order is id order.
  for (int64_t V : {int64_t(32000), int64_t(262144)}) {
    Logits l(V, 6);
    std::fill(l.v.begin(), l.v.end(), 1.25f);
    expect_same(l, rows_of(6, {{0, 0, 1, 0}, {1, 40, 1, 0}, {0.8f, 1000, 0.5f, 0}, {1, 0, 1, 0}, {1, 1, 1, 0},
                               {1, 0, 0.001f, 0}}));
  }
  {
    Logits l(32000, 2);
    std::fill(l.v.begin(), l.v.end(), -3.0f);
    expect_same(l, rows_of(2, {{1, 5000, 1, 0}, {1, 1500, 1, 0.5f}}));
  }
}

TEST(CudaSample, NanAndInf) {
  WEIR_REQUIRE_GPU();
  // (top-p alone at 0.05: the flat rows' nucleus stays within the GPU's 1024)
  const std::vector<Params> kinds = {{0, 0, 1, 0},    {1, 0, 1, 0},     {1, 40, 1, 0},           {1, 0, 0.05f, 0},
                                     {1, 0, 1, 0.05f}, {1, 2000, 1, 0}, {0.8f, 40, 0.95f, 0.05f}};
  const int64_t n = int64_t(kinds.size());
  for (int64_t V : {int64_t(7), int64_t(1000), int64_t(32000)}) {
    SCOPED_TRACE("V " + std::to_string(V));
    // NaN sprinkled (counts as -inf).
    Logits l = spread(V, n, uint64_t(V + 16));
    std::mt19937_64 rng(static_cast<uint64_t>(V));
    for (float& v : l.v)
      if (rng() % 5 == 0) v = kNaN;
    expect_same(l, rows_of(n, kinds));
    // +inf (counts as FLT_MAX): two of them and an FLT_MAX, lowest id first.
    Logits m = spread(V, n, uint64_t(V + 17));
    for (int64_t r = 0; r < n; ++r) {
      m.row(r)[V - 1] = kInf;
      m.row(r)[V / 2] = kInf;
      m.row(r)[V / 3] = FLT_MAX;
    }
    expect_same(m, rows_of(n, kinds));
    // Only -inf / NaN: -1 in every mode.
    Logits a(V, n);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < V; ++i) a.row(r)[i] = r % 2 ? -kInf : (i % 3 ? kNaN : -kInf);
    expect_same(a, rows_of(n, kinds));
    for (int32_t t : gpu_sample(a, rows_of(n, kinds))) EXPECT_EQ(t, -1);
    // One finite logit among -inf.
    Logits one(V, n);
    std::fill(one.v.begin(), one.v.end(), -kInf);
    for (int64_t r = 0; r < n; ++r) one.row(r)[(r * 13) % V] = -7.0f;
    expect_same(one, rows_of(n, kinds));
  }
}

// Rows of every mode in one launch, and rows apart by a padded stride (the
// unaligned, scalar load paths).
TEST(CudaSample, MixedRowsAndStrides) {
  WEIR_REQUIRE_GPU();
  const std::vector<Params> kinds = {{0, 0, 1, 0},         {1, 0, 1, 0},        {0.8f, 40, 0.95f, 0.05f},
                                     {1, 0, 0.9f, 0},      {1, 3000, 1, 0},     {1.2f, 0, 1, 0.05f},
                                     {0.6f, 1000, 1, 0},   {1, 2, 0.5f, 0.3f}};
  for (int64_t V : {int64_t(1000), int64_t(32000), int64_t(100003)}) {
    SCOPED_TRACE("V " + std::to_string(V));
    const int64_t n = 16;
    Logits l(V, n, V + 37);
    Rng rng{uint64_t(V + 18)};
    for (int64_t r = 0; r < n; ++r) (r % 2 ? fill_peaked : fill_spread)(l.row(r), V, rng);
    expect_same(l, rows_of(n, kinds));
  }
}

TEST(CudaSample, InCudaGraph) {
  WEIR_REQUIRE_GPU();
  const Logits l = peaked(32000, 8, 19);
  std::vector<Params> p = rows_of(8, {{0, 0, 1, 0}, {1, 0, 1, 0}, {0.8f, 40, 0.95f, 0.05f}, {1, 0, 0.9f, 0}});
  snap_u(l, p);
  Node node(l, p);
  const std::vector<int32_t> direct = node.run();
  cudaStream_t s;
  ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  node.dd.fill(0x55);
  cudaGraph_t g;
  ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "capture");
  op_sample(node.dst, node.ctx(s));
  ok(cudaStreamEndCapture(s, &g), "end capture");
  cudaGraphExec_t ge;
  ok(cudaGraphInstantiate(&ge, g, 0), "instantiate");
  for (int i = 0; i < 3; ++i) ok(cudaGraphLaunch(ge, s), "graph launch");
  ok(cudaStreamSynchronize(s), "sync");
  EXPECT_EQ(node.dd.download<int32_t>(), direct);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

TEST(CudaSample, BadOperands) {
  WEIR_REQUIRE_GPU();
  const Logits l = spread(100, 2, 20);
  Node node(l, rows_of(2, {{1, 0, 1, 0}}));
  Tensor bad_params = node.pr;
  bad_params.ne[0] = 4;
  Tensor d = node.dst;
  d.src[1] = &bad_params;
  EXPECT_THROW(sample_scratch_bytes(d), Error);
  EXPECT_THROW(op_sample(d, node.ctx()), Error);
  Tensor f = node.dst;
  f.dtype = DType::F32;
  EXPECT_THROW(op_sample(f, node.ctx()), Error);
  OpCtx small = node.ctx();
  small.scratch_bytes = 16;
  EXPECT_THROW(op_sample(node.dst, small), Error);
}

}  // namespace
}  // namespace weir::cuda
