// What the every-backend op suite (tests/backends/*ops*_test.cpp) shares:
// the backends and weight types it runs on, a graph run as a session runs
// one, the skip for what a backend does not support, and the comparison of
// a result with a float64 reference written in the test.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/registry.h"
#include "backends/named_backends.h"
#include "core/graph.h"
#include "core/quant/dequantize.h"
#include "core/quant/random_blocks.h"

namespace weir {
// Parameters name their dtype in gtest's messages ("q4_K", not bytes).
inline void PrintTo(DType t, std::ostream* os) { *os << dtype_name(t); }
}  // namespace weir

namespace weir::test {

// Host data of a graph's inputs, by the input tensor's name.
using Inputs = std::vector<std::pair<std::string, std::vector<uint8_t>>>;
// Builds the graph (external tensors point at host memory the test owns)
// and returns the tensors to read back.
using Builder = std::function<std::vector<Tensor*>(Graph&)>;
using Bytes = std::vector<uint8_t>;

template <class T>
Bytes bytes_of(const std::vector<T>& v) {
  Bytes b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}
inline std::vector<float> floats_of(const Bytes& b) {
  std::vector<float> v(b.size() / 4);
  if (!v.empty()) std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}
inline std::vector<int32_t> ints_of(const Bytes& b) {
  std::vector<int32_t> v(b.size() / 4);
  if (!v.empty()) std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}
inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The weight types of GGUF files whose blocks the suite draws at random
// (core/quant/random_blocks.h): every type a product, get_rows or
// mul_mat_id takes from a model file.
inline const std::vector<DType>& weight_types() {
  static const std::vector<DType> v = {DType::F32,  DType::F16,  DType::BF16,   DType::Q4_0,   DType::Q4_1,
                                       DType::Q5_0, DType::Q5_1, DType::Q8_0,   DType::Q2_K,   DType::Q3_K,
                                       DType::Q4_K, DType::Q5_K, DType::Q6_K,   DType::IQ4_NL, DType::IQ4_XS,
                                       DType::MXFP4};
  return v;
}
// Random blocks of type t: n rows of k, dequantizing to mean 0 and this std.
inline Bytes random_weights(DType t, int64_t k, int64_t n, uint64_t seed, float std = 0.05f) {
  Bytes w(row_bytes(t, k) * size_t(n));
  quant::random_fill(t, w.data(), k * n, 0.0f, std, seed);
  return w;
}
// n rows of k of type t, as float64 (dequantize_row: the format itself).
inline std::vector<double> dequantized(DType t, const Bytes& w, int64_t k, int64_t n) {
  std::vector<float> f(size_t(k * n));
  for (int64_t r = 0; r < n; ++r) dequantize_row(t, w.data() + size_t(r) * row_bytes(t, k), f.data() + r * k, k);
  return {f.begin(), f.end()};
}

// The CUDA backend's decode products (up to 8 tokens) of these types run
// on 8-bit activations (ops_mul_mat_q8.cu), as llama.cpp's do; the others
// on float ones.
inline bool cuda_q8_decode(DType t) {
  return t == DType::Q4_0 || t == DType::Q5_0 || t == DType::Q8_0 || t == DType::Q4_K || t == DType::Q5_K ||
         t == DType::Q6_K || t == DType::IQ4_NL || t == DType::IQ4_XS || t == DType::MXFP4;
}

// The first node of the graph that b has no kernel for, said in words; ""
// when b supports them all.
inline std::string unsupported(const Backend& b, const Builder& build) {
  Graph g;
  build(g);
  for (const Tensor& t : g.tensors()) {
    if (t.op == Op::Leaf || b.supports(t)) continue;
    std::ostringstream s;
    s << b.name() << " does not support " << op_name(t.op);
    if (t.src[0])
      s << " of " << dtype_name(t.src[0]->dtype) << " [" << t.src[0]->ne[0] << ", " << t.src[0]->ne[1] << "]";
    return s.str();
  }
  return "";
}
// Skips the test (with the reason) when the backend cannot run the graph.
#define WEIR_REQUIRE_SUPPORT(backend, build) \
  if (const std::string why_ = ::weir::test::unsupported(backend, build); !why_.empty()) GTEST_SKIP() << why_

// Runs the graph as a session does: plan once; then for each input set
// copy the inputs in through the queue, run, copy every output out, wait.
// Returns each run's outputs. A replayed plan (CUDA graphs from the second
// run on) must follow the new inputs.
inline std::vector<std::vector<Bytes>> run_graph(Backend& b, const Builder& build, const std::vector<Inputs>& runs) {
  Graph g;
  const std::vector<Tensor*> outs = build(g);
  for (Tensor* o : outs) g.mark_output(o);
  b.plan(g);
  std::vector<std::vector<Bytes>> results;
  for (const Inputs& in : runs) {
    for (Tensor& t : g.tensors())
      for (const auto& [name, data] : in)
        if (t.op == Op::Leaf && t.name == name) {
          EXPECT_EQ(data.size(), t.n_bytes()) << "input " << name;
          b.queue().copy_to_device(t.data, data.data(), std::min(data.size(), t.n_bytes()));
        }
    b.queue().run(g);
    std::vector<Bytes> got;
    for (Tensor* o : outs) {
      got.emplace_back(o->n_bytes());
      b.queue().copy_to_host(got.back().data(), o->data, o->n_bytes());
    }
    b.queue().synchronize();
    results.push_back(std::move(got));
  }
  b.release(g);
  return results;
}
// One output, two runs (the second on new inputs).
inline std::pair<Bytes, Bytes> run_twice(Backend& b, const std::function<Tensor*(Graph&)>& build, const Inputs& first,
                                         const Inputs& second) {
  const auto r = run_graph(b, [&](Graph& g) { return std::vector<Tensor*>{build(g)}; }, {first, second});
  return {r[0][0], r[1][0]};
}

// How far a result may be from its float64 reference, element i:
// |got_i - want_i| <= rel_max * max_j |want_j| + rel_mag * mag_i + abs,
// where mag_i is the scale of element i's rounding error (sum |a*b| of a
// dot product; |want_i| when no magnitudes are given).
struct Tol {
  double rel_max = 0, rel_mag = 0, abs = 0;
};
inline ::testing::AssertionResult near(const std::vector<float>& got, const std::vector<double>& want, const Tol& tol,
                                       const std::vector<double>* mag = nullptr) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << got.size() << " values, want " << want.size();
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  double worst = 0;  // the largest excess over the bound (NaN: infinite)
  size_t bad = 0, at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double bound = tol.rel_max * scale + tol.rel_mag * (mag ? (*mag)[i] : std::fabs(want[i])) + tol.abs;
    const double e = std::fabs(double(got[i]) - want[i]);
    if (e <= bound) continue;
    const double excess = std::isnan(e) ? INFINITY : e - bound;
    if (bad++ == 0 || excess > worst) worst = excess, at = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << want.size() << " values off; worst at " << at << ": got "
                                       << got[at] << ", want " << want[at] << " (largest |want| " << scale << ")";
}
inline ::testing::AssertionResult near(const Bytes& got, const std::vector<double>& want, const Tol& tol,
                                       const std::vector<double>* mag = nullptr) {
  return near(floats_of(got), want, tol, mag);
}
// Bit for bit (the first differing byte said).
inline ::testing::AssertionResult same_bytes(const Bytes& got, const Bytes& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << got.size() << " bytes, want " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i])
      return ::testing::AssertionFailure() << "byte " << i << " (float " << i / 4 << ") differs: got " << int(got[i])
                                           << ", want " << int(want[i]);
  return ::testing::AssertionSuccess();
}

// The backends, as tests/backends/named_backends.h names them.
inline const std::vector<std::string>& backend_names() {
  static const std::vector<std::string> v = {"cpu", "chaos", "cuda"};
  return v;
}
inline const std::string& backend_of(const std::string& p) { return p; }
inline const std::string& backend_of(const std::tuple<std::string, DType>& p) { return std::get<0>(p); }
inline std::string param_name(const std::string& p) { return p; }
inline std::string param_name(const std::tuple<std::string, DType>& p) {
  return std::get<0>(p) + "_" + dtype_name(std::get<1>(p));
}
struct ParamName {
  template <class Info>
  std::string operator()(const Info& info) const {
    return param_name(info.param);
  }
};

// A test on one backend of the parameter (and a dtype, where it has one);
// CUDA without a GPU skips.
template <class P>
class OnEveryBackend : public ::testing::TestWithParam<P> {
 protected:
  void SetUp() override {
    name_ = backend_of(this->GetParam());
    std::string why;
    if (name_ == "cuda" && cuda_devices(&why).empty()) GTEST_SKIP() << "no GPU: " << why;
    b_ = make_named_backend(name_, 100);
  }
  bool cuda() const { return name_ == "cuda"; }
  Backend& b() { return *b_; }
  std::string name_;
  std::unique_ptr<Backend> b_;
};

}  // namespace weir::test
