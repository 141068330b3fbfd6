#include "engine/imatrix_collector.h"

#include <algorithm>
#include <set>
#include <utility>

#include "core/error.h"

namespace weir {
namespace {

// The model tensor a weight leaf reads: Model::leaf_rows names a block of
// rows "NAME rows [a:b]" (and a vector "NAME [a:b]").
std::string weight_name(const Tensor& w) {
  std::string n = w.storage()->name;
  const size_t cut = n.find(" rows [");
  if (cut != std::string::npos) n.resize(cut);
  return n;
}

float at(const Tensor& t, int64_t i0, int64_t i1, int64_t i2) {
  return *reinterpret_cast<const float*>(static_cast<const char*>(t.data) + i0 * int64_t(t.nb[0]) +
                                         i1 * int64_t(t.nb[1]) + i2 * int64_t(t.nb[2]));
}

}  // namespace

void ImatrixCollector::attach(SessionParams& p) {
  p.on_graph = [this](Graph& g) { observe(g); };
  p.after_step = [this](const Graph& g) { collect(g); };
}

void ImatrixCollector::observe(Graph& g) {
  std::vector<Product>& list = products_[&g];
  list.clear();
  std::set<std::pair<std::string, const Tensor*>> seen;
  for (Tensor& t : g.tensors()) {
    if (t.op != Op::MulMat && t.op != Op::MulMatId) continue;
    const Tensor* w = t.src[0];
    Tensor* x = t.src[1];
    const std::string name = weight_name(*w);
    if (name.rfind("blk.", 0) != 0) continue;  // llama.cpp's default: layers only
    if (x->dtype != DType::F32) throw Error("imatrix: the input of " + name + " is not F32");
    if (!seen.insert({name, x->storage()}).second) continue;  // another row block of the same product
    Product p;
    p.weight = name;
    p.x = x;
    g.mark_output(x);
    if (t.op == Op::MulMatId) {
      p.ids = t.src[2];
      p.n_mat = w->ne[2];
      g.mark_output(t.src[2]);
    }
    list.push_back(std::move(p));
  }
}

void ImatrixCollector::collect(const Graph& g) {
  const auto it = products_.find(&g);
  if (it == products_.end()) return;
  for (const Product& p : it->second) {
    const Tensor& x = *p.x;
    const int64_t K = x.ne[0];
    Sums& s = sums_[p.weight];
    if (s.sum2.empty()) {
      s.n_per_row = K;
      s.sum2.assign(size_t(K * p.n_mat), 0.0);
      s.counts.assign(size_t(p.n_mat), 0);
    } else if (s.n_per_row != K || int64_t(s.counts.size()) != p.n_mat) {
      throw Error("imatrix: " + p.weight + " is read with inputs of " + std::to_string(K) + " columns and " +
                  std::to_string(s.n_per_row) + " elsewhere");
    }
    auto add = [&](int64_t mat, int64_t i1, int64_t i2) {
      double* acc = s.sum2.data() + mat * K;
      for (int64_t j = 0; j < K; ++j) {
        const double v = at(x, j, i1, i2);
        acc[j] += v * v;
      }
      ++s.counts[size_t(mat)];
    };
    if (!p.ids) {  // x [K, T] (any further dims are more tokens)
      for (int64_t i2 = 0; i2 < x.ne[2] * x.ne[3]; ++i2)
        for (int64_t t = 0; t < x.ne[1]; ++t) add(0, t, i2);
      continue;
    }
    // x [K, X, T], ids [k, T]: slot j of token t went to expert ids[j, t]
    // and read x[:, j % X, t].
    const Tensor& ids = *p.ids;
    for (int64_t t = 0; t < ids.ne[1]; ++t)
      for (int64_t j = 0; j < ids.ne[0]; ++j) {
        const int32_t e = *reinterpret_cast<const int32_t*>(static_cast<const char*>(ids.data) +
                                                            j * int64_t(ids.nb[0]) + t * int64_t(ids.nb[1]));
        if (e < 0 || e >= p.n_mat)
          throw Error("imatrix: " + p.weight + ": expert id " + std::to_string(e) + " out of range");
        add(e, j % x.ne[1], t);
      }
  }
}

Imatrix ImatrixCollector::result() const {
  Imatrix m;
  for (const auto& [name, s] : sums_) {
    ImatrixEntry e;
    e.n_per_row = s.n_per_row;
    e.in_sum2.assign(s.sum2.begin(), s.sum2.end());
    e.counts.assign(s.counts.begin(), s.counts.end());
    m.entries.emplace(name, std::move(e));
  }
  return m;
}

int64_t ImatrixCollector::max_count() const {
  int64_t n = 0;
  for (const auto& [name, s] : sums_)
    for (int64_t c : s.counts) n = std::max(n, c);
  return n;
}

}  // namespace weir
