#include "model/shard.h"

#include <string>

#include "core/error.h"

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
  const int64_t block = traits(down).block_size;
  if (n_ff % (int64_t(tp.size) * block) != 0)
    throw Error("--tp " + std::to_string(tp.size) + ": the FFN's " + std::to_string(n_ff) +
                " columns do not split into " + std::to_string(tp.size) + " equal parts of whole " +
                dtype_name(down) + " blocks (" + std::to_string(block) + " columns each)");
  const int64_t part = n_ff / tp.size;
  return {tp.rank * part, (tp.rank + 1) * part};
}

void check_tensor_parallel(const HParams& h, DType wo, DType down, int size) {
  for (int r = 0; r < size; ++r) {
    const TensorParallel tp{r, size, nullptr};
    const HeadShard s = shard_heads(h, tp);
    const int64_t cols = s.nq * h.head_dim_v, block = traits(wo).block_size;
    if (cols % block != 0)
      throw Error("--tp " + std::to_string(size) + ": a rank's " + std::to_string(s.nq) + " heads are " +
                  std::to_string(cols) + " columns of the attention output, not whole " + dtype_name(wo) +
                  " blocks (" + std::to_string(block) + " columns each)");
    shard_ffn(h.n_ff, down, tp);
  }
}

}  // namespace weir
