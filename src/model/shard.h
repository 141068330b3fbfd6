// Tensor parallelism in a model's graph: which heads, FFN columns and vocab
// rows a rank holds (vLLM's and Megatron's split), and the weight views that
// hold them.
//  - Attention is split by head groups: rank r runs query heads [q0, q0+nq)
//    and the kv heads they read. With more ranks than kv heads, each kv head
//    is replicated on the ranks whose query heads read it.
//  - Wq, Wk, Wv (and their biases) are split by rows (a rank's heads are
//    whole rows). Wo's input is the rank's heads: a row-parallel product.
//  - The FFN's gate and up are split by rows (its columns); down, whose
//    input they are, is a row-parallel product.
//  - Row-parallel products (Wo, down) in tp.row_parallel's form
//    (core/collective.h): PartialSums splits W by columns (the rank's slice
//    of x; on whole blocks of a quantized weight) and all-reduces the
//    partial sums; WholeRows gathers x, splits W by output rows and gathers
//    the rows (Model::row_parallel_product and row_parallel_join).
//  - The output matrix is split by vocab rows; the logits are gathered.
// Norms and the token embeddings are replicated.
#pragma once
#include <cstdint>
#include <vector>

#include "core/collective.h"
#include "core/dtype.h"
#include "model/hparams.h"
#include "model/loader.h"
#include "model/model.h"

namespace weir {

struct HeadShard {
  int64_t q0 = 0, nq = 0;    // query heads
  int64_t kv0 = 0, nkv = 0;  // kv heads
};

// This rank's heads. Throws Error naming the numbers when the heads do not
// split into tp.size equal groups.
HeadShard shard_heads(const HParams& h, const TensorParallel& tp);
// The hyper-parameters one rank's graph and KV cache see (its heads).
HParams shard_hparams(const HParams& h, const TensorParallel& tp);
// This rank's FFN columns. PartialSums: equal parts of whole blocks of
// `down`, the down projection's type (its rows are cut at these columns),
// else Error naming the numbers; WholeRows: split_range(n_ff), any n_ff.
Range shard_ffn(int64_t n_ff, DType down, const TensorParallel& tp);
// The parts of the model's weights that rank tp.rank's graphs read, as load
// items for `to` (model/loader.h): rows as byte ranges, column blocks as
// strided items. Found by building the rank's graph, so they are exactly
// the leaves it reads.
std::vector<LoadItem> rank_weight_items(const Model& m, const TensorParallel& tp, Backend* to);

// Throws Error when a model with these hyper-parameters cannot run split
// over `size` ranks with row-parallel products of form `form`: the heads do
// not split evenly, or (PartialSums) a rank's columns of the attention
// output (wo) or the FFN down are not equal parts of whole blocks of their
// types.
void check_tensor_parallel(const HParams& h, DType wo, DType down, int size,
                           RowParallel form = RowParallel::PartialSums);

}  // namespace weir
