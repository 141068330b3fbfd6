// get_rows: dst [K, T] F32, dst row t = table row ids[t] dequantized. The
// table may be any dequantizable dtype; ids are I32. Threads share t in chunks.
#include <cstring>
#include <string>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "backend/cpu/ops_common.h"
#include "backend/cpu/ops_dequant.h"

namespace weir::cpu {

void op_get_rows(const Tensor& dst, const OpContext& c) {
  const Tensor* table = dst.src[0];
  const Tensor* ids = dst.src[1];
  if (!table || !ids) return fail(c, "get_rows: " + dst.name + ": missing operands");
  const DTypeTraits* tr = dtype_traits(uint32_t(table->dtype));
  if (!tr || !tr->dequantizable)
    return fail(c, "get_rows: " + dst.name + ": table " + table->name + " has dtype " +
                       (tr ? tr->name : "?") + ", which cannot be dequantized");
  if (ids->dtype != DType::I32 || dst.dtype != DType::F32 || dst.nb[0] != sizeof(float))
    return fail(c, "get_rows: " + dst.name + ": ids must be I32 and dst F32");
  const int64_t K = table->ne[0], N = table->ne[1] * table->ne[2] * table->ne[3];
  const int64_t T = ids->n_elements();
  if (dst.ne[0] != K || dst.n_rows() != T)
    return fail(c, "get_rows: " + dst.name + ": shape does not match table " + shape_str(*table) +
                       " and ids " + shape_str(*ids));
  if (K % tr->block_size != 0)
    return fail(c, "get_rows: " + dst.name + ": row length " + std::to_string(K) +
                       " is not a multiple of the block size of " + table->name);
  // ids is a vector: element t at data + t * nb[0].
  if (ids->n_rows() != 1) return fail(c, "get_rows: " + dst.name + ": ids must be a vector");
  auto id_at = [&](int64_t t) {
    int32_t v;
    std::memcpy(&v, static_cast<const uint8_t*>(ids->data) + t * ids->nb[0], sizeof(v));
    return v;
  };
  // ids are read only inside a claimed chunk: they may be an activation
  // (a mixture's expert ids), and once a node's chunks are all done, the
  // threads that did them may go on past the next barrier and reuse that
  // memory while a thread that took no chunk is still here. A chunk checks
  // its ids before it writes any row.
  for_each_row_chunk(c, T, K, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int32_t id = id_at(t);
      if (id < 0 || id >= N)
        throw Error("get_rows: " + dst.name + ": id " + std::to_string(id) + " at position " + std::to_string(t) +
                    " is out of range for " + shape_str(*table));
    }
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t id = id_at(t);
      const int64_t i1 = id % table->ne[1], i2 = (id / table->ne[1]) % table->ne[2],
                    i3 = id / (table->ne[1] * table->ne[2]);
      const auto* src = static_cast<const uint8_t*>(table->data) + i1 * table->nb[1] +
                        i2 * table->nb[2] + i3 * table->nb[3];
      dequantize_rows(table->dtype, src, 0, 1, K, flat_row<float>(dst, t), 0);
    }
  });
}

}  // namespace weir::cpu
