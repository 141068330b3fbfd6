// The sampling kernels' rule (ops_sample.cu), asked on the host: the
// scratch a launch needs.
#include "backend/cuda/plan/sample_rules.h"

#include <climits>
#include <cstdint>
#include <string>

#include "backend/cuda/plan/kernel_rules.h"
#include "core/error.h"

namespace weir::cuda {
namespace sample {
namespace {

using u64 = unsigned long long;

size_t align256(size_t x) { return (x + 255) & ~size_t(255); }

}  // namespace

Plan plan_of(const Tensor& dst) {
  const Tensor* lg = dst.src[0];
  const Tensor* pr = dst.src[1];
  if (!lg || !pr || lg->dtype != DType::F32 || pr->dtype != DType::F32 || pr->ne[0] != 5 ||
      lg->nb[0] != sizeof(float) || pr->nb[0] != sizeof(float) || pr->n_rows() != lg->n_rows() ||
      dst.dtype != DType::I32 || dst.n_elements() != lg->n_rows() || !dst.is_contiguous())
    throw Error("sample: " + dst.name + ": needs F32 logits [V, n] and F32 params [5, n], gives I32 [n]");
  Plan pl;
  pl.V = lg->ne[0];
  pl.n = lg->n_rows();
  if (pl.V > INT32_MAX || pl.V < 0 || pl.n > 65535)
    throw Error("sample: " + dst.name + ": at most 2^31-1 logits and 65535 rows, got " + std::to_string(pl.V) +
                " x " + std::to_string(pl.n));
  if (pl.V == 0 || pl.n == 0) return pl;
  pl.nchunks = int((pl.V + kChunk - 1) / kChunk);
  pl.cap = int(pl.V < kMaxK ? pl.V : kMaxK);
  const size_t per = size_t(pl.n) * size_t(pl.nchunks);
  pl.off_sums = align256(per * sizeof(u64));
  pl.off_cand = pl.off_sums + align256(per * sizeof(double));
  pl.bytes = pl.off_cand + align256(per * size_t(pl.cap) * sizeof(u64));
  return pl;
}

}  // namespace sample

size_t sample_scratch_bytes(const Tensor& dst) { return sample::plan_of(dst).bytes; }

}  // namespace weir::cuda
