// Tensor parallelism in a model's graph: which heads, FFN columns and vocab
// rows a rank holds (vLLM's and Megatron's split), and the weight views that
// hold them.
//  - Attention is split by head groups: rank r runs query heads [q0, q0+nq)
//    and the kv heads they read. With more ranks than kv heads, each kv head
//    is replicated on the ranks whose query heads read it.
//  - Wq, Wk, Wv (and their biases) are split by rows (a rank's heads are
//    whole rows), Wo by columns (its input is the rank's heads): the
//    attention block ends in an all-reduce of Wo's partial sums.
//  - The FFN's gate and up are split by rows, down by columns, then an
//    all-reduce. Columns of a quantized weight split on whole blocks.
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
// This rank's FFN columns; `down` is the down projection's type (its rows
// are cut at these columns, on whole blocks). Throws Error naming the numbers.
Range shard_ffn(int64_t n_ff, DType down, const TensorParallel& tp);
// The parts of the model's weights that rank tp.rank's graphs read, as load
// items for `to` (model/loader.h): rows as byte ranges, column blocks as
// strided items. Found by building the rank's graph, so they are exactly
// the leaves it reads.
std::vector<LoadItem> rank_weight_items(const Model& m, const TensorParallel& tp, Backend* to);

// Throws Error when a model with these hyper-parameters cannot run split
// over `size` ranks (the heads or the FFN do not split evenly, or not on
// whole blocks of the attention output's (wo) or the FFN down's type).
void check_tensor_parallel(const HParams& h, DType wo, DType down, int size);

}  // namespace weir
