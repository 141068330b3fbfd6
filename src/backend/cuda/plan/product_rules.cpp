// The product kernels' rules (mul_mat: ops_mul_mat.cu, ops_mul_mat_q8.cu,
// ops_mul_mat_tile.cu, ops_mul_mat_mma.cu), asked on the host.
#include "backend/cuda/plan/product_rules.h"

#include <algorithm>
#include <cstdint>

#include "backend/cuda/plan/kernel_limits.h"
#include "backend/cuda/plan/kernel_rules.h"

namespace weir::cuda {

// ---- Which kernel ----

bool uses_vec(const Tensor& dst, const CudaOptions& o) {
  const int64_t T = dst.n_rows();
  if (T > kMaxVecTokens) return false;
  // Measured on an H200 (8B Q4_K_M, docs/perf-log.md 2026-11-29): at 8
  // tokens the 8-bit decode kernels read the FFN's gate/up weights at 537
  // GB/s, the 16-token MMA tiles at 1,389 (a step 4.1x -> 2.4x a 1-token
  // step); at 4 a step on the decode kernels (fused launches) cost no more
  // than one of 5 tokens on the tiles.
  return T < std::max(o.mma_min_tokens, kMinMmaTokens) || !dst.src[0] || T > tile_max_tokens(o) ||
         !mma_tile_fits(dst, o);
}
bool uses_tile(const Tensor& dst, const CudaOptions& o) {
  return !uses_vec(dst, o) && dst.n_rows() <= tile_max_tokens(o) && has_tile_mul_mat(dst.src[0]->dtype);
}

bool has_q8_mat_vec(DType w) {
  switch (w) {
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_NL:
    case DType::IQ4_XS:
    case DType::MXFP4: return true;
    default: return false;
  }
}

int64_t tile_max_tokens(const CudaOptions& o) { return o.tile_max_tokens > 0 ? o.tile_max_tokens : 64; }

bool has_tile_mul_mat(DType w) {
  if (w == DType::F32 || w == DType::F16 || w == DType::BF16) return false;
  return has_dequantizer(w);
}

bool mma_tile_fits(const Tensor& dst, const CudaOptions& o) {
  const Tensor& W = *dst.src[0];
  if (!o.tile_mma || W.ne[0] % 256) return false;
  if (!has_mma_tile(W.dtype)) return false;
  return !mma_tile_needs_16_byte_rows(W.dtype) || (reinterpret_cast<uintptr_t>(W.data) % 16 == 0 && W.nb[1] % 16 == 0);
}

// ---- Groups ----

int q8_max_group() { return kMaxMats; }
int tile_max_group() { return kMaxMats; }
int mul_mat_max_group() { return std::min(q8_max_group(), tile_max_group()); }

bool mul_mat_quantizes_x(const Tensor& dst, const CudaOptions& o) {
  return dst.src[0] && dst.src[1] && uses_vec(dst, o) && has_q8_mat_vec(dst.src[0]->dtype);
}

namespace {
// mul_mat_quantizes_x for the fused launches' products (always_vec).
bool small_quantizes_x(const Tensor& dst) {
  return dst.src[0] && dst.src[1] && always_vec(dst) && has_q8_mat_vec(dst.src[0]->dtype);
}
}  // namespace

bool can_group_mul_mat(const Tensor& a, const Tensor& b, const CudaOptions& o) {
  const bool q8 = mul_mat_quantizes_x(a, o) && mul_mat_quantizes_x(b, o);
  // CudaOptions::tile_group off: tile products one launch each (for comparisons).
  const bool tile =
      o.tile_group && a.src[0] && a.src[1] && b.src[0] && b.src[1] && uses_tile(a, o) && uses_tile(b, o);
  // The float decode kernel (F16, BF16, F32, the other types) groups too
  // (CudaOptions::float_group off: one launch each).
  const bool vec = o.float_group && a.src[0] && a.src[1] && b.src[0] && b.src[1] && uses_vec(a, o) && uses_vec(b, o) &&
                   !has_q8_mat_vec(a.src[0]->dtype) && !has_q8_mat_vec(b.src[0]->dtype);
  return (q8 || tile || vec) && a.src[1] == b.src[1] && a.src[0]->dtype == b.src[0]->dtype &&
         a.src[0]->ne[0] == b.src[0]->ne[0] && a.n_rows() == b.n_rows();
}

// ---- Memory ----

size_t q8_act_bytes(int64_t K, int64_t T) {
  return q8_quant_bytes(K, T) + size_t(K / 32) * size_t(T) * kQ8PairBytes;
}

int64_t tile_k_steps(int64_t K) { return (K + kTileStepK - 1) / kTileStepK; }

int tile_max_splits(int64_t K, int64_t T, int64_t cols) {
  const int64_t by_bytes = int64_t(kTileMaxPartialBytes / (size_t(T) * size_t(cols) * sizeof(float)));
  return int(
      std::max<int64_t>(1, std::min<int64_t>({kTileMaxSplits, by_bytes, tile_k_steps(K) / kTileMinSplitSteps})));
}

size_t tile_scratch_bytes(const Tensor& dst) {
  const int64_t K = dst.src[0]->ne[0], N = dst.src[0]->ne[1], T = dst.n_rows();
  const int s = tile_max_splits(K, T, N);
  return s > 1 ? size_t(s) * size_t(T) * size_t(N) * sizeof(float) : 0;
}

size_t slice_rows(const Tensor& dst) {
  const int64_t K = dst.src[0]->ne[0], N = dst.src[0]->ne[1];
  return size_t(std::max<int64_t>(1, std::min<int64_t>(N, int64_t(kSliceBytes / (size_t(K) * 2)))));
}

size_t mul_mat_scratch_bytes(const Tensor& dst, const CudaOptions& o) {
  if (!dst.src[0]) return 0;
  if (uses_vec(dst, o)) return has_q8_mat_vec(dst.src[0]->dtype) ? q8_act_bytes(dst.src[0]->ne[0], dst.n_rows()) : 0;
  const DType wt = dst.src[0]->dtype;
  const size_t K = size_t(dst.src[0]->ne[0]), T = size_t(dst.n_rows());
  if (wt == DType::F32) return 0;
  const size_t xb = (T * K * 2 + 255) / 256 * 256;
  if (uses_tile(dst, o)) return xb + tile_scratch_bytes(dst);
  if (wt == DType::F16 || wt == DType::BF16) return xb;
  return xb + slice_rows(dst) * K * 2;
}

// ---- Deferred norms ----

size_t deferred_norm_q8_bytes(int64_t K, int64_t T) {
  return (q8_act_bytes(K, T) + 255) / 256 * 256 + size_t(K / 32) * size_t(T) * sizeof(float);
}

float* norm_sums(void* deferred_norm, int64_t K, int64_t T) {
  return reinterpret_cast<float*>(static_cast<char*>(deferred_norm) + (q8_act_bytes(K, T) + 255) / 256 * 256);
}

bool q8_can_defer_norm(const Tensor& product, const Tensor& add, const Tensor& norm, const Tensor& mul) {
  const Tensor* W = product.src[0];
  if (product.op != Op::MulMat || !W || !product.src[1] || !has_q8_mat_vec(W->dtype)) return false;
  const int64_t T = product.n_rows();
  const Tensor* r = add.src[0] == &product ? add.src[1] : add.src[1] == &product ? add.src[0] : nullptr;
  return T >= 1 && T <= kMaxTwoRowTokens && W->ne[1] % 32 == 0 && product.ne[0] == W->ne[1] && r && r != &product &&
         can_fuse_add_rms_norm_mul(add, norm, mul) && add.ne[0] == W->ne[1] && add.n_rows() == T &&
         reinterpret_cast<uintptr_t>(mul.src[1]->data) % 4 == 0;
}

const Tensor* rms_norm_of(const Tensor& x) {
  const Tensor* norm = x.op == Op::Mul ? x.src[0] : nullptr;
  if (!norm || norm->op != Op::RmsNorm || !norm->src[0] || !x.src[1]) return nullptr;
  return norm;
}

bool vec_can_defer_norm(const Tensor& product, const Tensor& add, const Tensor& norm, const Tensor& mul) {
  const Tensor* W = product.src[0];
  if (product.op != Op::MulMat || !W || !product.src[1] || !always_vec(product) || has_q8_mat_vec(W->dtype) ||
      !has_vec_ends(W->dtype))
    return false;
  const int64_t T = product.n_rows();
  const Tensor* r = add.src[0] == &product ? add.src[1] : add.src[1] == &product ? add.src[0] : nullptr;
  return rows_per_warp(int(T)) == 2 && product.ne[0] == W->ne[1] && r && r != &product &&
         can_fuse_add_rms_norm_mul(add, norm, mul) && add.ne[0] == W->ne[1] && add.n_rows() == T &&
         rms_norm_of(mul) == &norm && add.ne[0] % 4 == 0 && add.dtype == DType::F32 && add.nb[0] == 4 &&
         add.nb[1] % 16 == 0 && mul.dtype == DType::F32 && mul.nb[0] == 4;
}

bool can_defer_norm(const Tensor& product, const Tensor& add, const Tensor& norm, const Tensor& mul) {
  return q8_can_defer_norm(product, add, norm, mul) || vec_can_defer_norm(product, add, norm, mul);
}

bool mul_mat_takes_deferred_norm(const Tensor& producer, const Tensor& taker) {
  const Tensor* W = taker.src[0];
  if (taker.op != Op::MulMat || !W || !taker.src[1] || !always_vec(taker) || taker.n_rows() != producer.n_rows())
    return false;
  if (small_quantizes_x(producer)) return small_quantizes_x(taker);
  return !has_q8_mat_vec(W->dtype) && has_vec_ends(W->dtype) && W->ne[0] % 8 == 0;
}

size_t deferred_norm_bytes(const Tensor& product) {
  // The float kernel's: a block's partial sums, at least two rows a block.
  const size_t T = size_t(product.n_rows());
  return small_quantizes_x(product) ? deferred_norm_q8_bytes(product.ne[0], product.n_rows())
                                      : T * (size_t((product.ne[0] + 1) / 2 + 3) / 4 * 4) * sizeof(float);
}

// ---- Row jobs ----

bool can_run_row_jobs(const Tensor* const* dsts, int n, const RopeStoreNode* jobs) {
  if (n < 1 || n > kMaxMats) return false;
  const DType wt = dsts[0]->src[0] ? dsts[0]->src[0]->dtype : DType::F32;
  for (int k = 0; k < n; ++k) {
    const Tensor& d = *dsts[k];
    const Tensor& job = *jobs[k].node;
    const int64_t N = d.ne[0], T = d.n_rows();
    // Two rows a warp (a rope's pair): the kernels for up to 4 tokens (both
    // kernels take two rows a warp there).
    if (d.op != Op::MulMat || !d.src[0] || d.src[0]->dtype != wt || !always_vec(d) || T < 1 ||
        rows_per_warp(int(T)) != 2 || N % 2 || !d.is_contiguous())
      return false;
    if (!has_q8_mat_vec(wt) && !has_vec_ends(wt)) return false;
    const Tensor* src = job.op == Op::Rope ? job.src[0] : job.op == Op::SetRows ? job.src[1] : nullptr;
    if (!src || src->storage() != &d || (src != &d && (src->view_offset != 0 || !src->is_contiguous()))) return false;
    if (job.op == Op::Rope) {
      const int64_t D = src->ne[0], H = src->ne[1];
      if (!can_rope_store(job) || RopeMode(job.iparams[1]) != RopeMode::Normal || job.iparams[0] != D || D % 2 ||
          D * H != N || src->ne[2] != T || job.ne[3] != 1 || !job.src[1] || job.src[1]->dtype != DType::I32)
        return false;
      if (jobs[k].into && !can_rope_into(job, *jobs[k].into)) return false;
    } else if (src->ne[0] != N || src->n_rows() != T || !job.src[0] || !job.src[2] || job.src[2]->dtype != DType::I32 ||
               (job.src[0]->dtype != DType::F32 && job.src[0]->dtype != DType::F16 &&
                job.src[0]->dtype != DType::Q8_0)) {
      return false;
    }
    // An 8-bit cache takes whole 32-element blocks (run_jobs_q8): the 8-bit
    // kernels' launch of 16 warps a block for one token.
    const Tensor* table = job.op == Op::SetRows ? job.src[0] : jobs[k].into ? jobs[k].into->src[0] : nullptr;
    if (table && table->dtype == DType::Q8_0 && (!has_q8_mat_vec(wt) || T != 1 || N % 32)) return false;
  }
  return true;
}

// ---- The GLU in the gate/up launch ----

bool can_fuse_glu(const Tensor& a, const Tensor& b, const Tensor& glu) {
  if (glu.op != Op::SiluMul && glu.op != Op::GeluMul) return false;
  const Tensor* gate = glu.src[0];
  const Tensor* up = glu.src[1];
  if (!gate || !up || gate == up || !((gate == &a && up == &b) || (gate == &b && up == &a))) return false;
  const Tensor* W = gate->src[0];
  const int64_t T = gate->n_rows(), N = gate->ne[0];
  return gate->op == Op::MulMat && up->op == Op::MulMat && W && up->src[0] && has_q8_mat_vec(W->dtype) &&
         up->src[0]->dtype == W->dtype && gate->src[1] && gate->src[1] == up->src[1] && T >= 1 &&
         T <= kMaxTwoRowTokens && up->n_rows() == T && up->ne[0] == N && N % 32 == 0 && W->ne[1] == N &&
         up->src[0]->ne[1] == N && gate->is_contiguous() && up->is_contiguous() && glu.dtype == DType::F32 &&
         glu.ne[0] == N && glu.n_rows() == T;
}

bool can_fuse_vec_glu(const Tensor& a, const Tensor& b, const Tensor& glu) {
  if (glu.op != Op::SiluMul && glu.op != Op::GeluMul) return false;
  const Tensor* gate = glu.src[0];
  const Tensor* up = glu.src[1];
  if (!gate || !up || gate == up || !((gate == &a && up == &b) || (gate == &b && up == &a))) return false;
  const Tensor* W = gate->src[0];
  const Tensor* Wu = up->src[0];
  if (gate->op != Op::MulMat || up->op != Op::MulMat || !W || !Wu || !gate->src[1] || gate->src[1] != up->src[1])
    return false;
  const int64_t T = gate->n_rows(), N = gate->ne[0];
  return always_vec(*gate) && rows_per_warp(int(T)) == 2 && !has_q8_mat_vec(W->dtype) && Wu->dtype == W->dtype &&
         W->ne[0] == Wu->ne[0] && W->ne[1] == N && Wu->ne[1] == N && up->n_rows() == T && up->ne[0] == N &&
         glu.dtype == DType::F32 && glu.nb[0] == 4 && glu.ne[0] == N && glu.n_rows() == T && glu.is_contiguous();
}

size_t glu_q8_bytes(const Tensor& glu) { return q8_act_bytes(glu.ne[0], glu.n_rows()); }

}  // namespace weir::cuda
