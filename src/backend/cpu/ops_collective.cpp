// all_reduce and all_gather on the CPU: one thread of the pool calls the
// group's collective (core/collective.h) on host memory while the others
// wait at the next barrier (the plan puts one before every reader).
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ops_common.h"
#include "core/collective.h"
#include "core/error.h"

namespace weir::cpu {

void op_all_reduce(const Tensor& t, const OpContext& ctx) {
  on_thread_zero(ctx, [&] {
    const Tensor& x = *t.src[0];
    t.comm->all_reduce_sum(static_cast<const float*>(x.data), static_cast<float*>(t.data), size_t(t.n_elements()),
                           nullptr);
  });
}

void op_all_gather(const Tensor& t, const OpContext& ctx) {
  on_thread_zero(ctx, [&] {
    const Tensor& x = *t.src[0];
    t.comm->all_gather_rows(static_cast<const float*>(x.data), size_t(x.ne[0]), static_cast<float*>(t.data),
                            size_t(t.ne[0]), t.ne[0], t.ne[1], nullptr);
  });
}

}  // namespace weir::cpu
