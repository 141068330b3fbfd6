// mul_mat with quantized activations: y [N, T] = W [K, N] x [K, T], x in
// Q8_0 / Q8_K rows (quantize_act), W of a type with integer kernels (qdot.h).
//
// The rows [n0, n1) go in chunks whose weights fit in L2 (kWeightChunkBytes);
// each chunk meets the tokens kTileMax at a time in one tile call, which
// repacks those tokens' activations (L1) and runs every row of the chunk
// past them. Each weight block is thus unpacked once per kTileMax tokens
// and read from L2 T / kTileMax times. For decode (T = 1) this is one pass
// over the weights.
#include <algorithm>
#include <string>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/ops_common.h"
#include "backend/cpu/ops_mul_mat_q.h"
#include "backend/cpu/qdot.h"
#include "backend/cpu/repack.h"
#include "core/error.h"

namespace weir::cpu {
namespace {

constexpr size_t kWeightChunkBytes = 192 * 1024;

std::string check_mul_mat_q(const Tensor& dst, const QDotKernels& k) {
  const Tensor* w = dst.src[0];
  const Tensor* x = dst.src[1];
  if (!w || !x) return "mul_mat: " + dst.name + ": missing operands";
  auto where = [&] { return "mul_mat " + dst.name + " (W " + shape_str(*w) + ", x " + shape_str(*x) + ")"; };
  if (!k) return where() + ": no integer kernels for W dtype " + dtype_name(w->dtype);
  if (x->dtype != activation_type(w->dtype))
    return where() + ": x is " + dtype_name(x->dtype) + ", W needs " + dtype_name(activation_type(w->dtype));
  if (dst.dtype != DType::F32 || dst.nb[0] != sizeof(float)) return where() + ": y must be F32 with contiguous rows";
  if (w->ne[0] != x->ne[0] || dst.ne[0] != w->ne[1] || dst.n_rows() != x->ne[1] ||
      x->ne[2] * x->ne[3] != 1 || w->ne[2] * w->ne[3] != 1 || dst.ne[2] * dst.ne[3] != 1)
    return where() + ": shapes do not match";
  if (x->ne[0] % traits(x->dtype).block_size != 0) return where() + ": K is not a multiple of the block size";
  return {};
}

}  // namespace

bool is_quantized_activation(DType t) { return t == DType::Q8_0 || t == DType::Q8_K; }

void mul_mat_q_rows(const Tensor& dst, int64_t n0, int64_t n1, Scratch* /*s*/) {
  const Tensor& W = *dst.src[0];
  const Tensor& X = *dst.src[1];
  const QDotKernels k = qdot_kernels(W.dtype);
  if (std::string e = check_mul_mat_q(dst, k); !e.empty()) throw Error(e);
  const int64_t K = W.ne[0], T = X.ne[1];
  const auto* wbase = static_cast<const uint8_t*>(W.data);
  const auto* xbase = static_cast<const uint8_t*>(X.data);
  const size_t ws = W.nb[1], xs = X.nb[1];
  float* y = static_cast<float*>(dst.data);
  const size_t ldy = dst.nb[1] / sizeof(float);
  const int64_t rows = std::max<int64_t>(1, int64_t(kWeightChunkBytes / ws));
  for (int64_t r0 = n0; r0 < n1; r0 += rows) {
    const int mr = int(std::min(rows, n1 - r0));
    for (int64_t t = 0; t < T; t += kTileMax) {
      const int nr = int(std::min<int64_t>(kTileMax, T - t));
      k.tile(K, wbase + r0 * ws, ws, mr, xbase + t * xs, xs, nr, y + t * ldy + r0, ldy);
    }
  }
}

void mul_mat_repacked_rows(const Tensor& dst, const RepackedWeight& rw, int64_t n0, int64_t n1) {
  const Tensor& X = *dst.src[1];
  const RepackedTileFn tile = repacked_tile(rw.type);
  if (!tile || X.dtype != activation_type(rw.type) || X.ne[0] != rw.K || dst.ne[0] != rw.N)
    throw Error("mul_mat " + dst.name + ": the repacked weight does not fit its operands");
  const int64_t T = X.ne[1];
  const auto* xbase = static_cast<const uint8_t*>(X.data);
  const size_t xs = X.nb[1];
  float* y = static_cast<float*>(dst.data);
  const size_t ldy = dst.nb[1] / sizeof(float);
  // Whole groups in chunks whose weights fit in L2, each met by the tokens
  // kTileMax at a time, as mul_mat_q_rows does; a last group cut by N (its
  // padding rows) through a small buffer.
  const int64_t full_end = std::min(n1, rw.N) / kRepackRows;
  const int64_t chunk = std::max<int64_t>(1, int64_t(kWeightChunkBytes / rw.group_bytes));
  for (int64_t g0 = n0 / kRepackRows; g0 < full_end; g0 += chunk) {
    const int64_t g1 = std::min(g0 + chunk, full_end);
    for (int64_t t = 0; t < T; t += kTileMax) {
      const int nr = int(std::min<int64_t>(kTileMax, T - t));
      tile(rw.K, rw.data + size_t(g0) * rw.group_bytes, rw.group_bytes, int(g1 - g0), xbase + t * xs, xs, nr,
           y + t * ldy + g0 * kRepackRows, ldy);
    }
  }
  const int64_t last = full_end * kRepackRows;
  if (n1 > last && last >= n0) {
    float part[kTileMax * kRepackRows];
    for (int64_t t = 0; t < T; t += kTileMax) {
      const int nr = int(std::min<int64_t>(kTileMax, T - t));
      tile(rw.K, rw.data + size_t(full_end) * rw.group_bytes, rw.group_bytes, 1, xbase + t * xs, xs, nr, part,
           kRepackRows);
      for (int j = 0; j < nr; ++j)
        for (int64_t n = last; n < n1; ++n) y[(t + j) * ldy + n] = part[j * kRepackRows + (n - last)];
    }
  }
}

}  // namespace weir::cpu
