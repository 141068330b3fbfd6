// Mixture-of-experts ops (core/graph.h) on the GPU: top_k and moe_weights
// (a warp a token), mul_mat_id (each (slot, token) pair's rows of its
// chosen expert, the expert read from ids on the device: only the chosen
// experts' rows are read, and a CUDA graph replays the step whatever the
// routing), moe_sum. mul_mat_id of the integer types runs on 8-bit
// activations (ops_moe_q8.cu); the kernel here, for the others (F16, BF16,
// F32 ...), dequantizes 8 elements at a time and dots them with F32 x.
#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/moe_ops.h"
#include "backend/cuda/plan/kernel_limits.h"

namespace weir::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

__device__ __forceinline__ float finite_or_low(float v) { return isnan(v) ? -INFINITY : v; }

// a before b in top_k's order: larger value, then lower index.
__device__ __forceinline__ bool before(float av, int ai, float bv, int bi) {
  return av > bv || (av == bv && ai < bi);
}

__global__ void top_k_kernel(Rows x, int64_t E, int k, int32_t* out, int64_t T) {
  pdl_wait();
  const int lane = threadIdx.x % 32;
  const int64_t t = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (t >= T) return;
  const float* v = reinterpret_cast<const float*>(x.row(t));
  float pv = INFINITY;  // the previous round's choice: every pick comes after it in the order
  int pi = -1;
  for (int r = 0; r < k; ++r) {
    float bv = -INFINITY;
    int bi = int(E);  // none
    for (int64_t i = lane; i < E; i += 32) {
      const float f = finite_or_low(v[i]);
      if (before(pv, pi, f, int(i)) && (bi == int(E) || before(f, int(i), bv, bi))) bv = f, bi = int(i);
    }
    for (int o = 16; o > 0; o /= 2) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (oi != int(E) && (bi == int(E) || before(ov, oi, bv, bi))) bv = ov, bi = oi;
    }
    if (lane == 0) out[t * k + r] = bi;
    pv = bv, pi = bi;
  }
}

__global__ void moe_weights_kernel(Rows logits, int64_t E, const int32_t* ids, int k, bool normalize, float* w,
                                   int64_t T) {
  pdl_wait();
  const int lane = threadIdx.x % 32;
  const int64_t t = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (t >= T) return;
  const float* l = reinterpret_cast<const float*>(logits.row(t));
  float m = -INFINITY;
  for (int64_t i = lane; i < E; i += 32) m = fmaxf(m, finite_or_low(l[i]));
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float s = 0;
  for (int64_t i = lane; i < E; i += 32) s += expf(finite_or_low(l[i]) - m);
  for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  // k <= 32 (the launcher checks): lane j takes slot j.
  float wj = 0;
  if (lane < k) {
    const int32_t e = ids[t * k + lane];
    wj = e >= 0 && e < E ? expf(finite_or_low(l[e]) - m) / s : 0.0f;
  }
  if (normalize) {
    float sw = wj;
    for (int o = 16; o > 0; o /= 2) sw += __shfl_xor_sync(0xffffffffu, sw, o);
    if (sw > 0) wj /= sw;
  }
  if (lane < k) w[t * k + lane] = wj;
}

// top_k and moe_weights of the same logits in one warp a token, the
// logits held in registers (lane l: values l, l + 32, ...; E <= 32 V): a
// pick is a lane's best among its values not yet taken, then the warp's
// largest key (redux.sync: the value's bits in an order that compares as
// unsigned), then the lowest index holding it; then the weights as
// moe_weights_kernel computes them (the same sums in the same order). The
// same results as the two kernels, bit for bit, in a fraction of their
// time (the picks were a loop of loads and shuffles a round).
// (kRouteValues, values a lane: plan/kernel_limits.h.)
__device__ __forceinline__ uint32_t order_key(float f) {  // larger float, larger key; every key > 0
  const uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__global__ void route_kernel(Rows x, int64_t E, int k, bool normalize, int32_t* ids, float* w, int64_t T) {
  constexpr int V = kRouteValues;
  pdl_wait();
  const int lane = threadIdx.x % 32;
  const int64_t t = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (t >= T) return;
  const float* v = reinterpret_cast<const float*>(x.row(t));
  float val[V];
  uint32_t key[V];  // 0: taken, or no such value
#pragma unroll
  for (int m = 0; m < V; ++m) {
    const int64_t i = lane + 32 * m;
    val[m] = i < E ? finite_or_low(v[i]) : -INFINITY;
    key[m] = i < E ? order_key(val[m] == 0.0f ? 0.0f : val[m]) : 0u;  // -0 ties +0, as in floats
  }
  int mine = int(E);
  for (int r = 0; r < k; ++r) {
    uint32_t best = 0;
    int bm = 0;
#pragma unroll
    for (int m = 0; m < V; ++m)
      if (key[m] > best) best = key[m], bm = m;  // strictly: the lower index among equals
    const uint32_t top = __reduce_max_sync(0xffffffffu, best);
    const uint32_t at = best == top && top != 0 ? uint32_t(lane + 32 * bm) : 0xffffffffu;
    const uint32_t bi = __reduce_min_sync(0xffffffffu, at);
    const int id = top == 0 ? int(E) : int(bi);  // none left: E, as top_k_kernel
    if (top != 0 && int(bi) % 32 == lane) {
#pragma unroll
      for (int m = 0; m < V; ++m)
        if (m == int(bi) / 32) key[m] = 0;
    }
    if (lane == 0) ids[t * k + r] = id;
    if (lane == r) mine = id;
  }
  float mx = -INFINITY;
#pragma unroll
  for (int m = 0; m < V; ++m)
    if (lane + 32 * m < E) mx = fmaxf(mx, val[m]);
  for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float s = 0;
#pragma unroll
  for (int m = 0; m < V; ++m)
    if (lane + 32 * m < E) s += expf(val[m] - mx);
  for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  float wj = 0;
  if (lane < k) wj = mine >= 0 && mine < E ? expf(finite_or_low(v[mine]) - mx) / s : 0.0f;
  if (normalize) {
    float sw = wj;
    for (int o = 16; o > 0; o /= 2) sw += __shfl_xor_sync(0xffffffffu, sw, o);
    if (sw > 0) wj /= sw;
  }
  if (lane < k) w[t * k + lane] = wj;
}

// y [N, k, T] (contiguous): y[:, j, t] = W[:, :, ids[j, t]] x[:, j', t].
// Block: kWarpsPerBlock warps, each `rows` rows of one pair (blockIdx.y).
template <DType WT>
__global__ void mul_mat_id_kernel(const uint8_t* w, size_t w_row, size_t w_expert, int64_t E, Rows x,
                                  int64_t x_per_token, const int32_t* ids, int k, int64_t K, int64_t N, int rows,
                                  float* y) {
  pdl_wait();
  const int lane = threadIdx.x % 32;
  const int64_t pair = blockIdx.y;  // j + k * t
  const int32_t e = ids[pair];
  const int64_t n0 = (int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32) * rows;
  float* yr = y + pair * N;
  if (e < 0 || e >= E) {  // never read outside the weights
    for (int64_t n = n0 + lane; n < min(N, n0 + rows); n += 32) yr[n] = __int_as_float(0x7fc00000);
    return;
  }
  const int64_t j = pair % k, t = pair / k;
  const float* xr = reinterpret_cast<const float*>(x.row(x_per_token == 1 ? t : j + k * t));
  const uint8_t* we = w + size_t(e) * w_expert;
  constexpr int G = Q<WT>::QK / 8;
  for (int64_t n = n0; n < min(N, n0 + rows); ++n) {
    const uint8_t* row = we + size_t(n) * w_row;
    float acc = 0;
    for (int64_t gi = lane; gi < K / 8; gi += 32) {
      float v[8];
      Q<WT>::dq8(row + (gi / G) * Q<WT>::BYTES, int(gi % G), v);
      const float4 a = *reinterpret_cast<const float4*>(xr + 8 * gi);
      const float4 b = *reinterpret_cast<const float4*>(xr + 8 * gi + 4);
      acc += v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w + v[4] * b.x + v[5] * b.y + v[6] * b.z + v[7] * b.w;
    }
    for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) yr[n] = acc;
  }
}

__global__ void moe_sum_kernel(const float* y, const float* w, int64_t N, int k, int64_t T, float* out) {
  pdl_wait();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N * T) return;
  const int64_t n = i % N, t = i / N;
  const float* wt = w + t * k;
  const float* yt = y + t * k * N + n;
  float acc = wt[0] * yt[0];
  for (int j = 1; j < k; ++j) acc = acc + wt[j] * yt[j * N];
  out[i] = acc;
}

unsigned warp_blocks(int64_t T) { return unsigned((T + kWarpsPerBlock - 1) / kWarpsPerBlock); }

}  // namespace

void op_top_k(const Tensor& dst, const OpCtx& c) {
  const Tensor* x = dst.src[0];
  if (!x || x->dtype != DType::F32 || x->nb[0] != 4 || dst.dtype != DType::I32 || !dst.is_contiguous())
    bad_operands("top_k", dst, "needs F32 values and a contiguous I32 result");
  const int64_t T = dst.ne[1];
  if (T == 0) return;
  launch_kernel(top_k_kernel, warp_blocks(T), 32 * kWarpsPerBlock, 0, c.launch_stream(), rows_of(*x), x->ne[0],
                int(dst.ne[0]), static_cast<int32_t*>(dst.data), T);
  WEIR_CUDA_CHECK_LAUNCH();
}

void op_moe_weights(const Tensor& dst, const OpCtx& c) {
  const Tensor* l = dst.src[0];
  const Tensor* ids = dst.src[1];
  if (!l || !ids || l->dtype != DType::F32 || l->nb[0] != 4 || ids->dtype != DType::I32 || !ids->is_contiguous() ||
      !dst.is_contiguous() || dst.ne[0] > 32)
    bad_operands("moe_weights", dst, "needs F32 logits, contiguous I32 ids and at most 32 experts a token");
  const int64_t T = dst.ne[1];
  if (T == 0) return;
  launch_kernel(moe_weights_kernel, warp_blocks(T), 32 * kWarpsPerBlock, 0, c.launch_stream(), rows_of(*l), l->ne[0],
                static_cast<const int32_t*>(ids->data), int(dst.ne[0]), dst.iparams[0] != 0,
                static_cast<float*>(dst.data), T);
  WEIR_CUDA_CHECK_LAUNCH();
}

void op_route(const Tensor& top_k, const Tensor& weights, const OpCtx& c) {
  if (!can_fuse_route(top_k, weights)) bad_operands("top_k", top_k, "cannot compute " + weights.name + " with it");
  const int64_t T = top_k.ne[1];
  if (T == 0) return;
  const Tensor& l = *top_k.src[0];
  launch_kernel(route_kernel, warp_blocks(T), 32 * kWarpsPerBlock, 0, c.launch_stream(), rows_of(l), l.ne[0],
                int(top_k.ne[0]), weights.iparams[0] != 0, static_cast<int32_t*>(top_k.data),
                static_cast<float*>(weights.data), T);
  WEIR_CUDA_CHECK_LAUNCH();
}

void op_mul_mat_id(const Tensor& dst, const OpCtx& c) {
  if (has_expert_q8(dst)) return expert_mul_mat(dst, c);
  const Tensor* W = dst.src[0];
  const Tensor* X = dst.src[1];
  const Tensor* ids = dst.src[2];
  if (!W || !X || !ids || X->dtype != DType::F32 || X->nb[0] != 4 || ids->dtype != DType::I32 ||
      !ids->is_contiguous() || !dst.is_contiguous() || W->ne[0] % 8 || W->ne[0] % traits(W->dtype).block_size)
    bad_operands("mul_mat_id", dst, "needs F32 x, contiguous I32 ids and result, rows of whole blocks");
  const int64_t K = W->ne[0], N = W->ne[1], E = W->ne[2], k = ids->ne[0], T = ids->ne[1];
  if (T == 0) return;
  const int rows = 2;  // a warp's rows
  const dim3 grid(unsigned((N + kWarpsPerBlock * rows - 1) / (kWarpsPerBlock * rows)), unsigned(k * T));
  const int64_t x_per_token = X->n_rows() / T;
  const bool ok = dispatch_dtype(W->dtype, [&]<DType WT>() {
    launch_kernel(mul_mat_id_kernel<WT>, grid, 32 * kWarpsPerBlock, 0, c.launch_stream(),
                  static_cast<const uint8_t*>(W->data), W->nb[1], W->nb[2], E, rows_of(*X), x_per_token,
                  static_cast<const int32_t*>(ids->data), int(k), K, N, rows, static_cast<float*>(dst.data));
  });
  if (!ok) bad_operands("mul_mat_id", dst, std::string("no GPU kernel for weight type ") + dtype_name(W->dtype));
  WEIR_CUDA_CHECK_LAUNCH();
}

void op_moe_sum(const Tensor& dst, const OpCtx& c) {
  const Tensor* y = dst.src[0];
  const Tensor* w = dst.src[1];
  if (!y || !w || !y->is_contiguous() || !w->is_contiguous() || !dst.is_contiguous())
    bad_operands("moe_sum", dst, "needs contiguous operands");
  const int64_t N = y->ne[0], k = y->ne[1], T = y->ne[2];
  if (N * T == 0) return;
  launch_kernel(moe_sum_kernel, unsigned((N * T + 255) / 256), 256, 0, c.launch_stream(),
                static_cast<const float*>(y->data), static_cast<const float*>(w->data), N, int(k), T,
                static_cast<float*>(dst.data));
  WEIR_CUDA_CHECK_LAUNCH();
}

}  // namespace weir::cuda
