#include "model/shard.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/graph.h"
#include "model/kv_cache.h"

namespace weir {

HeadShard shard_heads(const HParams& h, const TensorParallel& tp) {
  const int64_t n = tp.size, Hq = h.n_head, Hkv = h.n_head_kv;
  HeadShard s;
  if (n <= 1) return {0, Hq, 0, Hkv};
  const std::string tp_flag = "--tp " + std::to_string(n);
  if (Hq % n != 0)
    throw Error(tp_flag + ": the model's " + std::to_string(Hq) + " query heads do not split into " +
                std::to_string(n) + " equal groups");
  s.nq = Hq / n;
  s.q0 = tp.rank * s.nq;
  if (Hkv % n == 0) {  // each rank its own kv heads
    s.nkv = Hkv / n;
    s.kv0 = tp.rank * s.nkv;
  } else if (n % Hkv == 0) {  // more ranks than kv heads: each kv head on n / Hkv ranks
    s.nkv = 1;
    s.kv0 = tp.rank / (n / Hkv);
  } else {
    throw Error(tp_flag + ": the model's " + std::to_string(Hkv) + " kv heads neither split into " +
                std::to_string(n) + " groups nor divide " + std::to_string(n) + " ranks evenly");
  }
  return s;
}

HParams shard_hparams(const HParams& h, const TensorParallel& tp) {
  HParams l = h;
  const HeadShard s = shard_heads(h, tp);
  l.n_head = s.nq;
  l.n_head_kv = s.nkv;
  return l;
}

Range shard_ffn(int64_t n_ff, DType down, const TensorParallel& tp) {
  if (tp.size <= 1) return {0, n_ff};
  if (tp.row_parallel == RowParallel::WholeRows) return split_range(n_ff, tp.size, tp.rank);
  const int64_t block = traits(down).block_size;
  if (n_ff % (int64_t(tp.size) * block) != 0)
    throw Error("--tp " + std::to_string(tp.size) + ": the FFN's " + std::to_string(n_ff) +
                " columns do not split into " + std::to_string(tp.size) + " equal parts of whole " +
                dtype_name(down) + " blocks (" + std::to_string(block) + " columns each)");
  const int64_t part = n_ff / tp.size;
  return {tp.rank * part, (tp.rank + 1) * part};
}

std::vector<LoadItem> rank_weight_items(const Model& m, const TensorParallel& tp, Backend* to) {
  // A one-token graph of the rank (its KV cache a cell on `to`) reads every
  // weight part that any of its graphs reads.
  KVCache kv(shard_hparams(m.hparams(), tp), 1, DType::F32, *to);
  const ForwardGraph fg = m.build(1, 1, 1, kv, false, tp);
  const GGUFFile& f = m.file();
  // The file's tensors by address, to find the one a leaf points into.
  std::vector<std::pair<const uint8_t*, size_t>> by_addr;
  for (size_t i = 0; i < f.tensors().size(); ++i) by_addr.push_back({f.tensors()[i].data, i});
  std::sort(by_addr.begin(), by_addr.end());
  std::vector<LoadItem> items;
  std::set<std::pair<const void*, size_t>> seen;
  for (const Tensor& t : fg.graph->tensors()) {
    if (t.op != Op::Leaf || !t.data) continue;
    const auto* p = static_cast<const uint8_t*>(t.data);
    if (p < f.base() || p >= f.base() + f.size()) continue;  // not a weight (the KV cache)
    if (!seen.insert({t.data, t.n_bytes()}).second) continue;
    auto it = std::upper_bound(by_addr.begin(), by_addr.end(), std::make_pair(p, SIZE_MAX));
    if (it == by_addr.begin()) continue;
    --it;
    const GGUFTensorInfo& w = f.tensors()[it->second];
    LoadItem item;
    item.tensor = it->second;
    item.backend = to;
    item.begin = uint64_t(p - w.data);
    if (t.is_contiguous()) {
      item.end = item.begin + t.n_bytes();
    } else {
      item.rows = uint64_t(t.n_rows());
      item.row_bytes = t.row_size();
      item.row_stride = t.nb[1];
    }
    items.push_back(item);
  }
  return items;
}

Tensor* Model::row_parallel_product(Graph& g, const GGUFTensorInfo& w, Tensor* x, Range k, const TensorParallel& tp) {
  if (tp.size <= 1 || tp.row_parallel == RowParallel::PartialSums)
    return g.mul_mat(leaf_cols(g, w, k.begin, k.end), x);  // [N, T], a partial sum
  const int64_t K = w.ne[0], N = w.ne[1];
  const Range mine = split_range(K, tp.size, tp.rank);
  if (k.begin != mine.begin || k.end != mine.end)
    throw Error(std::string(w.name) + ": rank " + std::to_string(tp.rank) + " of " + std::to_string(tp.size) +
                " holds input rows [" + std::to_string(k.begin) + ", " + std::to_string(k.end) +
                "), the gather expects [" + std::to_string(mine.begin) + ", " + std::to_string(mine.end) + ")");
  const Range rows = split_range(N, tp.size, tp.rank);
  return g.mul_mat(leaf_rows(g, w, rows.begin, rows.end), g.all_gather(x, K, tp.comm));  // [N_r, T]
}

Tensor* Model::row_parallel_join(Graph& g, Tensor* y, int64_t n, const TensorParallel& tp) {
  if (tp.size <= 1) return y;
  if (tp.row_parallel == RowParallel::PartialSums) return g.all_reduce(y, tp.comm);
  return g.all_gather(y, n, tp.comm);
}

void check_tensor_parallel(const HParams& h, DType wo, DType down, int size, RowParallel form) {
  for (int r = 0; r < size; ++r) {
    const TensorParallel tp{r, size, nullptr, form};
    const HeadShard s = shard_heads(h, tp);
    if (form == RowParallel::WholeRows) continue;  // any split of wo's rows and the FFN's
    const int64_t cols = s.nq * h.head_dim_v, block = traits(wo).block_size;
    if (cols % block != 0)
      throw Error("--tp " + std::to_string(size) + ": a rank's " + std::to_string(s.nq) + " heads are " +
                  std::to_string(cols) + " columns of the attention output, not whole " + dtype_name(wo) +
                  " blocks (" + std::to_string(block) + " columns each)");
    shard_ffn(h.n_ff, down, tp);
  }
}

}  // namespace weir
