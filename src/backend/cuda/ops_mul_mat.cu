// mul_mat: y [N, T] = W [K, N] x [K, T], W of any dtype with a device
// dequantizer (dequant.cuh), x and y F32.
//
//  - Few tokens (T <= kMaxVecTokens, decode and small batches; for the MMA
//    tile kernel's types up to CudaOptions::mma_min_tokens - 1): kernels
//    that stream W once, one warp per weight row. For Q4_0, Q5_0, Q8_0,
//    Q4_K, Q5_K and Q6_K, x is quantized to 8 bits and met with integer dot
//    products (ops_mul_mat_q8.cu, as llama.cpp computes them); other types
//    dequantize 8 elements at a time in registers and multiply with x in
//    float.
//  - Small batches (up to tile_max_tokens(), batched decode, a speculative
//    step's verify): quantized W read once per tile of 16, 32 or 64
//    tokens and met with x on the tensor cores in one
//    kernel: its bytes go straight to mma fragments for the common types
//    (ops_mul_mat_mma.cu), else through an fp16 tile in shared memory
//    (ops_mul_mat_tile.cu).
//  - More tokens (prefill): tensor cores through cuBLAS: W is dequantized to
//    fp16 (F16 and BF16 weights are used as they are) in slices of rows that
//    fit the scratch, x is converted once, and cublasGemmEx computes
//    y = W x in fp32 accumulators. F32 weights take cublasSgemm on x as is.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/dequant_half.cuh"
#include "backend/cuda/glu.cuh"
#include "backend/cuda/mul_mat_q8.h"
#include "backend/cuda/mul_mat_tile.h"
#include "backend/cuda/plan/product_rules.h"
#include "backend/cuda/product_ends.cuh"
#include "backend/cuda/product_group.cuh"

namespace weir::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

// A warp takes R weight rows (2 up to 4 tokens: rows_per_warp, plan/
// kernel_limits.h), so each x load serves R of them; WARPS_PER_ROW warps per
// row group (more for short matrices: warps in flight cover the memory
// latency); each lane takes groups of 8 elements, kUnroll groups of each row
// at a time with all their loads issued first.

// The ends of a launch, as types: a plain launch runs the code it ran
// before the others came.
struct VecPlain {};
// The GLU applied by a gate/up launch (can_fuse_vec_glu): h = act(gate) * up
// stored to y (rows of ldy) in place of gate and up.
struct VecGlu {
  float* y;
  int64_t ldy;
  bool gelu;  // else silu
};
// The rows given to rope / set_rows jobs instead of stored (can_run_row_jobs,
// product_ends.cuh).
struct VecJobs : ProductJobs {};
// The writer's side of a deferred norm (the add+norm launch): s = W a + r
// (the residual stream) and x = s * w (w: the norm's weights) stored, x not
// yet divided by rms,
// and each block's sum of squares of its rows of s (ss[t][block]); blocks
// of at least 4 rows (add_norm_warps_per_row).
struct VecAddOut {
  Rows r, s, x;
  const float* w;
  float* ss;  // token t's at ss + t * ld
  int ld;
};
// The readers' side (P > 0: "NORM"): their results divided by
// sqrt(sum(ss[t][0..n)) / k + eps). Each thread loads P partials a token
// into registers as it starts and sums them at the end, when they have long
// arrived, the rest (past 128 P) loaded and summed there. P fits n (H100,
// 8B F16 same call: summing them first made every block wait for them, its
// gate/up launch 4% slower; 16 held where 8 would do cost warps, 1B F16
// -3%; 8 held where 16 were needed made the end wait, 8B -1.5%; copying
// them to shared memory (cp.async) cost occupancy and L1, 8B -19%).
struct VecNorm {
  const float* ss;
  int n, ld;
  float k, eps;
};
// The partials a thread holds for n of them, `tokens` tokens (the kernels
// there are).
inline int held_partials(int64_t n, int tokens) {
  if (tokens > 1) return 2;
  return n <= 256 ? 2 : n <= 1024 ? 8 : 16;
}

// early (F16): W is written by no kernel of the graph, so the first step's
// rows are loaded before pdl_wait(), while the kernel ahead finishes.
// m: up to kMaxMats products on the same x (product_group.cuh), one launch.
// WARPS_PER_ROW warps a row group. Epilogue: how the launch ends (VecPlain,
// VecGlu, VecJobs, VecAddOut). GLU: m is gate and up; a warp (WARPS_PER_ROW
// warps) takes gate row j and up row j and stores h_j.
template <DType T, int TOKENS, int WARPS_PER_ROW, class Epilogue, int P = 0>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    mat_vec_kernel(Mats m, int64_t K, Rows x, bool early, Epilogue epi, VecNorm norm_in) {
  constexpr bool GLU = std::is_same_v<Epilogue, VecGlu>, JOBS = std::is_same_v<Epilogue, VecJobs>;
  constexpr bool ADD = std::is_same_v<Epilogue, VecAddOut>, NORM = P > 0;
  constexpr int R = rows_per_warp(TOKENS);
  static_assert(!GLU || R == 2, "a GLU warp takes a gate row and an up row");
  static_assert(!JOBS || R == 2, "a rope takes a warp's two rows as a pair");
  // F16 rows are kept as loaded (16 bytes for 8 weights) until used, so
  // twice as many loads fit in the registers.
  constexpr bool kRaw = T == DType::F16;
  constexpr int kRowsPerBlock = kWarpsPerBlock / WARPS_PER_ROW * R, kThreadsPerRow = 32 * WARPS_PER_ROW,
                kUnroll = (kRaw ? 8 : 4) / R;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row0 = int64_t(blockIdx.x) * kRowsPerBlock + int64_t(warp / WARPS_PER_ROW) * R;
  const int sub = (warp % WARPS_PER_ROW) * 32 + lane;
  const uint8_t* w[R];
  bool live[R];
  float* yr[R];
  int64_t ld[R];
  if constexpr (GLU) {  // output j = row0 / 2: gate row j, up row j
    const int64_t j = row0 / 2;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      live[r] = j < m.rows[0];
      w[r] = m.w[r] + size_t(live[r] ? j : 0) * m.stride[r];
      yr[r] = nullptr, ld[r] = 0;
    }
  } else {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      live[r] = row0 + r < m.total;
      locate(m, live[r] ? row0 + r : 0, &w[r], &yr[r], &ld[r]);  // a dead row reads row 0, never stored
    }
  }
  constexpr int G = Q<T>::QK / 8;  // groups of 8 per block
  const int64_t groups = K / 8;
  // The raw rows of a step (F16): every group loaded first, past the end the
  // last group again (loaded, not used).
  uint4 raw[kRaw ? kUnroll : 1][R];
  const auto load_raw = [&](int64_t g0) {
#pragma unroll
    for (int k = 0; k < (kRaw ? kUnroll : 1); ++k) {
      const int64_t g = min(g0 + int64_t(k) * kThreadsPerRow, groups - 1);
#pragma unroll
      for (int r = 0; r < R; ++r) raw[k][r] = reinterpret_cast<const uint4*>(w[r])[g];
    }
  };
  const bool preloaded = kRaw && early && live[0];
  if (preloaded) load_raw(sub);
  // ADD: the thread that stores (sub 0) loads the norm's weights of its
  // rows now (no kernel writes them) and their residuals after the wait.
  float norm_w[R], resid[R][TOKENS];
  if constexpr (ADD)
    if (live[0] && sub == 0)
#pragma unroll
      for (int r = 0; r < R; ++r) norm_w[r] = live[r] ? epi.w[row0 + r] : 0.0f;
  pdl_wait();
  float acc[R][TOKENS];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) acc[r][t] = 0.0f;
  if constexpr (ADD)
    if (live[0] && sub == 0)
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < TOKENS; ++t)
          resid[r][t] = live[r] ? reinterpret_cast<const float*>(epi.r.row(t))[row0 + r] : 0.0f;
  // NORM: this thread's share of the add+norm launch's partial sums, loaded
  // now, summed at the end.
  constexpr int kThreads = 32 * kWarpsPerBlock;
  float held[TOKENS][NORM ? P : 1];
  if constexpr (NORM)
#pragma unroll
    for (int t = 0; t < TOKENS; ++t)
#pragma unroll
      for (int j = 0; j < P; ++j) {
        const int i = int(threadIdx.x) + j * kThreads;
        held[t][j] = i < norm_in.n ? norm_in.ss[t * norm_in.ld + i] : 0.0f;
      }
  float js[TOKENS], jc[TOKENS];  // row jobs: the rope's angle
  if constexpr (JOBS)
    if (live[0]) job_angles<TOKENS>(m, epi, row0, js, jc);
  const float* xr[TOKENS];
#pragma unroll
  for (int t = 0; t < TOKENS; ++t) xr[t] = reinterpret_cast<const float*>(x.row(t));
  for (int64_t g0 = sub; live[0] && g0 < groups; g0 += kThreadsPerRow * kUnroll) {
    if constexpr (kRaw) {
      if (!preloaded || g0 != sub) load_raw(g0);
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int64_t g = g0 + int64_t(k) * kThreadsPerRow;
        if (g >= groups) break;
#pragma unroll
        for (int t = 0; t < TOKENS; ++t) {
          const float4 a = *reinterpret_cast<const float4*>(xr[t] + 8 * g);
          const float4 b = *reinterpret_cast<const float4*>(xr[t] + 8 * g + 4);
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const __half2* h = reinterpret_cast<const __half2*>(&raw[k][r]);
            const float2 u0 = __half22float2(h[0]), u1 = __half22float2(h[1]), u2 = __half22float2(h[2]),
                         u3 = __half22float2(h[3]);
            acc[r][t] +=
                u0.x * a.x + u0.y * a.y + u1.x * a.z + u1.y * a.w + u2.x * b.x + u2.y * b.y + u3.x * b.z + u3.y * b.w;
          }
        }
      }
    } else {
      float v[kUnroll][R][8];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int64_t g = g0 + int64_t(k) * kThreadsPerRow;
        if (g < groups)
#pragma unroll
          for (int r = 0; r < R; ++r) Q<T>::dq8(w[r] + (g / G) * Q<T>::BYTES, int(g % G), v[k][r]);
      }
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int64_t g = g0 + int64_t(k) * kThreadsPerRow;
        if (g >= groups) break;
#pragma unroll
        for (int t = 0; t < TOKENS; ++t) {
          const float4 a = *reinterpret_cast<const float4*>(xr[t] + 8 * g);
          const float4 b = *reinterpret_cast<const float4*>(xr[t] + 8 * g + 4);
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const float* u = v[k][r];
            acc[r][t] +=
                u[0] * a.x + u[1] * a.y + u[2] * a.z + u[3] * a.w + u[4] * b.x + u[5] * b.y + u[6] * b.z + u[7] * b.w;
          }
        }
      }
    }
  }
  // NORM: token t's sum of squares, by the whole block (a fixed order: every
  // block gets the same sum).
  float inv[TOKENS];
  if constexpr (NORM) {
    __shared__ float sq[kWarpsPerBlock][TOKENS];
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) {
      float p = 0.0f;
#pragma unroll
      for (int j = 0; j < P; ++j) p += held[t][j];
      for (int i = int(threadIdx.x) + P * kThreads; i < norm_in.n; i += kThreads) p += norm_in.ss[t * norm_in.ld + i];
      p = warp_sum(p);
      if (lane == 0) sq[warp][t] = p;
    }
    __syncthreads();
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) {
      float ss = 0.0f;
#pragma unroll
      for (int j = 0; j < kWarpsPerBlock; ++j) ss += sq[j][t];
      inv[t] = 1.0f / sqrtf(ss / norm_in.k + norm_in.eps);
    }
  }
  // The row sums across the row group's threads, to the thread that stores them.
  const bool mine = reduce_row_sums<TOKENS, WARPS_PER_ROW, kWarpsPerBlock, R>(acc, warp, lane) && live[0];
  if constexpr (ADD) {
    // s and x, and the block's sum of squares of s (rows in order).
    __shared__ float sq[kWarpsPerBlock][TOKENS];
    float q[TOKENS];
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) q[t] = 0.0f;
    if (mine)
#pragma unroll
      for (int r = 0; r < R; ++r)
        if (live[r])
#pragma unroll
          for (int t = 0; t < TOKENS; ++t) {
            const float v = acc[r][t] + resid[r][t];
            reinterpret_cast<float*>(const_cast<char*>(epi.s.row(t)))[row0 + r] = v;
            reinterpret_cast<float*>(const_cast<char*>(epi.x.row(t)))[row0 + r] = v * norm_w[r];
            q[t] += v * v;
          }
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) {
      q[t] = warp_sum(q[t]);
      if (lane == 0) sq[warp][t] = q[t];
    }
    __syncthreads();
    if (threadIdx.x < TOKENS) {
      float ss = 0.0f;
#pragma unroll
      for (int j = 0; j < kWarpsPerBlock; ++j) ss += sq[j][threadIdx.x];
      epi.ss[int64_t(threadIdx.x) * epi.ld + blockIdx.x] = ss;
    }
    return;
  }
  if (!mine) return;
  float out[R][TOKENS];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) out[r][t] = NORM ? acc[r][t] * inv[t] : acc[r][t];
  if constexpr (GLU) {
    float* h = epi.y + row0 / 2;
#pragma unroll
    for (int t = 0; t < TOKENS; ++t)
      h[t * epi.ldy] = epi.gelu ? GeluMulF{}(out[0][t], out[1][t]) : SiluMulF{}(out[0][t], out[1][t]);
  } else if constexpr (JOBS) {
    run_jobs<TOKENS, R>(out, m, row0, epi, js, jc);
  } else {
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (live[r])
#pragma unroll
        for (int t = 0; t < TOKENS; ++t) yr[r][t * ld[r]] = out[r][t];
  }
}

// How a float launch ends (the Vec* types above), set by vec_products.
struct VecEnds {
  VecNorm norm_in{};     // its ss set: x is a deferred norm's s * w (NORM)
  bool jobs = false;     // the rows go to jobs
  ProductJobs j{};       //   (these)
  VecGlu glu{};          // its y set: gate and up, and their GLU
  VecAddOut add_norm{};  // its s set: the add+norm launch, writing a deferred norm
};

// Warps a row group: enough warps to fill the GPU (96 per SM: 8B F16
// decode 3% faster than at 48 on an H100), at least 256 groups a row-warp.
int vec_warps_per_row(int64_t warp_rows, int64_t K, const OpCtx& c) {
  int wpr = 1;
  const int64_t want = int64_t(c.sm_count) * mat_vec_warps_per_sm(96, c.options().decode_warps_per_sm);
  while (wpr < kWarpsPerBlock && warp_rows * wpr < want && K / 8 >= int64_t(256) * wpr) wpr *= 2;
  return wpr;
}

// The add+norm launch's warps a row group: the plain launch's, capped by
// CudaOptions::add_norm_warps_per_row (for tuning: fewer, larger blocks, fewer partial sums).
int add_norm_warps_per_row(int64_t N, int64_t K, int64_t T, const OpCtx& c) {
  const int o = c.options().add_norm_warps_per_row;
  const int cap = o > 0 ? std::min(kWarpsPerBlock, o) : kWarpsPerBlock;
  const int R = rows_per_warp(int(T));
  return std::min(cap, vec_warps_per_row((N + R - 1) / R, K, c));
}

template <DType T, int TOKENS, class Epilogue, int P = 0>
void launch_vec(int wpr, unsigned grid, const Mats& m, int64_t K, const Rows& x, bool early, const Epilogue& epi,
                const VecEnds& e, const OpCtx& c) {
  if (wpr == 1)
    launch_kernel(mat_vec_kernel<T, TOKENS, 1, Epilogue, P>, grid, 32 * kWarpsPerBlock, 0, c.launch_stream(), m, K, x,
                  early, epi, e.norm_in);
  else if (wpr == 2)
    launch_kernel(mat_vec_kernel<T, TOKENS, 2, Epilogue, P>, grid, 32 * kWarpsPerBlock, 0, c.launch_stream(), m, K, x,
                  early, epi, e.norm_in);
  else
    launch_kernel(mat_vec_kernel<T, TOKENS, 4, Epilogue, P>, grid, 32 * kWarpsPerBlock, 0, c.launch_stream(), m, K, x,
                  early, epi, e.norm_in);
  WEIR_CUDA_CHECK_LAUNCH();
}

// A NORM launch, holding as many partials as fit their count (held_partials).
template <DType T, int TOKENS, class Epilogue>
void launch_vec_deferred_norm(int wpr, unsigned grid, const Mats& m, int64_t K, const Rows& x, bool early,
                              const Epilogue& epi, const VecEnds& e, const OpCtx& c) {
  const int p = held_partials(e.norm_in.n, TOKENS);
  if constexpr (TOKENS == 1) {
    if (p == 16) return launch_vec<T, TOKENS, Epilogue, 16>(wpr, grid, m, K, x, early, epi, e, c);
    if (p == 8) return launch_vec<T, TOKENS, Epilogue, 8>(wpr, grid, m, K, x, early, epi, e, c);
  }
  launch_vec<T, TOKENS, Epilogue, 2>(wpr, grid, m, K, x, early, epi, e, c);
}

// The products dsts[0..n) (same x, W type and K) in one launch, ending as e says.
template <DType T, int TOKENS>
void mat_vec_for_tokens(const Tensor* const* dsts, int n, const OpCtx& c, const VecEnds& e) {
  const Tensor& dst = *dsts[0];
  const int64_t K = dst.src[0]->ne[0];
  const Mats m = group_mats(dsts, n);
  const int64_t N = m.total;
  const Rows x = rows_of(*dst.src[1]);
  const bool early = c.weights_constant && c.options().early_weights;
  constexpr int R = rows_per_warp(TOKENS);
  const bool norm = e.norm_in.ss != nullptr;
  if constexpr (R == 2) {
    if (e.glu.y) {
      if (n != 2 || m.rows[0] != m.rows[1]) bad_operands("mul_mat", dst, "a GLU launch takes gate and up");
      // Like the plain launch: rows (here pairs) a warp, warps a row.
      const int64_t pairs = m.rows[0];
      const int wpr = vec_warps_per_row(pairs, K, c);
      const unsigned grid = blocks_for(pairs, kWarpsPerBlock / wpr);
      if constexpr (has_vec_ends(T))
        if (norm) return launch_vec_deferred_norm<T, TOKENS>(wpr, grid, m, K, x, early, e.glu, e, c);
      if (!norm) return launch_vec<T, TOKENS>(wpr, grid, m, K, x, early, e.glu, e, c);
    }
    if constexpr (has_vec_ends(T)) {
      const int wpr = vec_warps_per_row((N + R - 1) / R, K, c);
      const unsigned grid = blocks_for(N, kWarpsPerBlock / wpr * R);
      if (e.add_norm.s.base) {
        if (n != 1 || norm) bad_operands("mul_mat", dst, "an add+norm launch takes one product of a plain x");
        const int aw = add_norm_warps_per_row(N, K, TOKENS, c);
        return launch_vec<T, TOKENS>(aw, blocks_for(N, kWarpsPerBlock / aw * R), m, K, x, early, e.add_norm, e, c);
      }
      const VecJobs jobs{e.j};
      if (e.jobs && norm) return launch_vec_deferred_norm<T, TOKENS>(wpr, grid, m, K, x, early, jobs, e, c);
      if (e.jobs) return launch_vec<T, TOKENS>(wpr, grid, m, K, x, early, jobs, e, c);
      if (norm) return launch_vec_deferred_norm<T, TOKENS>(wpr, grid, m, K, x, early, VecPlain{}, e, c);
    }
  }
  if (e.glu.y || e.jobs || norm || e.add_norm.s.base)
    bad_operands("mul_mat", dst,
                 "no float launch for this GLU, deferred norm or row jobs (at most 4 tokens; F16, BF16, F32)");
  const int wpr = vec_warps_per_row((N + R - 1) / R, K, c);
  launch_vec<T, TOKENS>(wpr, blocks_for(N, kWarpsPerBlock / wpr * R), m, K, x, early, VecPlain{}, e, c);
}

template <DType T>
void mat_vec(const Tensor* const* dsts, int n, const OpCtx& c, const VecEnds& e) {
  switch (dsts[0]->n_rows()) {
    case 1: return mat_vec_for_tokens<T, 1>(dsts, n, c, e);
    case 2: return mat_vec_for_tokens<T, 2>(dsts, n, c, e);
    case 3: return mat_vec_for_tokens<T, 3>(dsts, n, c, e);
    case 4: return mat_vec_for_tokens<T, 4>(dsts, n, c, e);
    case 5: return mat_vec_for_tokens<T, 5>(dsts, n, c, e);
    case 6: return mat_vec_for_tokens<T, 6>(dsts, n, c, e);
    case 7: return mat_vec_for_tokens<T, 7>(dsts, n, c, e);
    default: return mat_vec_for_tokens<T, 8>(dsts, n, c, e);
  }
}

// The blocks of the add+norm launch of `product`: its partial sums.
int64_t vec_blocks(const Tensor& product, const OpCtx& c) {
  const int64_t N = product.src[0]->ne[1], K = product.src[0]->ne[0];
  const int R = rows_per_warp(int(product.n_rows()));
  return blocks_for(N, kWarpsPerBlock / add_norm_warps_per_row(N, K, product.n_rows(), c) * R);
}

// The float decode kernel on dsts[0..n) (types without 8-bit kernels):
// with c.x_from DeferredNorm, x is a deferred norm's s * w, not yet divided
// by rms (VecNorm); with c.row_jobs, the rows go to them; `e` says the rest
// (GLU, add+norm).
void vec_products(const Tensor* const* dsts, int n, const OpCtx& c, VecEnds e = {}) {
  const Tensor& dst = *dsts[0];
  const DType wt = dst.src[0]->dtype;
  const Tensor& x = *dst.src[1];
  if (c.x_from == ActivationSource::DeferredNorm) {
    const int64_t T = dst.n_rows(), n = c.deferred_norm_writer ? vec_blocks(*c.deferred_norm_writer, c) : 0,
                  ld = (n + 3) / 4 * 4;
    if (!c.deferred_norm_writer || !c.deferred_norm || size_t(ld * T) * sizeof(float) > c.deferred_norm_capacity)
      bad_operands("mul_mat", dst, "no deferred norm to read x from");
    e.norm_in =
        VecNorm{static_cast<const float*>(c.deferred_norm), int(n), int(ld), float(x.ne[0]), c.deferred_norm_eps};
  }
  if (c.row_jobs) {
    if (!can_run_row_jobs(dsts, n, c.row_jobs)) bad_operands("mul_mat", dst, "cannot run these rope/set_rows jobs");
    e.jobs = true;
    for (int k = 0; k < n; ++k) e.j.j[k] = make_rope_job(c.row_jobs[k]);
  }
  if (!dispatch_dtype(wt, [&]<DType WT>() { mat_vec<WT>(dsts, n, c, e); }))
    bad_operands("mul_mat", dst, std::string("no GPU kernel for W type ") + dtype_name(wt));
}

// Rows [0, n) of W (starting at w) to fp16, row-major [n][K].
template <DType T>
__global__ void dequant_f16_kernel(const uint8_t* w, size_t w_stride, int64_t K, int64_t n, __half* out) {
  pdl_wait();
  constexpr int G = Q<T>::QK / 8;
  const int64_t groups = K / 8;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n * groups;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / groups, g = i % groups;
    *reinterpret_cast<uint4*>(out + r * K + 8 * g) =
        dq8_half<T>(w + size_t(r) * w_stride + (g / G) * Q<T>::BYTES, int(g % G));
  }
}

// x rows to fp16 or bf16 [T][K]; fp16 saturates at its largest finite value.
template <class H>
__global__ void convert_x_kernel(Rows x, int64_t K, int64_t T, H* out) {
  pdl_wait();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < T * K; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / K, k = i % K;
    const float v = reinterpret_cast<const float*>(x.row(t))[k];
    if constexpr (sizeof(H) == 2 && std::is_same_v<H, __half>)
      out[i] = __float2half_rn(fminf(fmaxf(v, -65504.0f), 65504.0f));
    else
      out[i] = __float2bfloat16_rn(v);
  }
}

void check(const Tensor& dst) {
  const Tensor* W = dst.src[0];
  const Tensor* x = dst.src[1];
  if (!W || !x) bad_operands("mul_mat", dst, "missing operands");
  if (x->dtype != DType::F32 || x->nb[0] != 4 || dst.dtype != DType::F32 || dst.nb[0] != 4 || !dst.is_contiguous())
    bad_operands("mul_mat", dst, "x and y must be F32 with contiguous rows");
  if (W->ne[0] != x->ne[0] || dst.ne[0] != W->ne[1] || dst.n_rows() != x->n_rows() || W->ne[2] * W->ne[3] != 1)
    bad_operands("mul_mat", dst, "shapes " + shape_of(*W) + " and " + shape_of(*x) + " do not match");
  if (W->ne[0] % 8 || W->ne[0] % traits(W->dtype).block_size)
    bad_operands("mul_mat", dst, "K is not a multiple of the block size");
  // 16-byte loads of x rows.
  if (reinterpret_cast<uintptr_t>(x->data) % 16 || x->nb[1] % 16 || x->nb[2] % 16 || x->nb[3] % 16)
    bad_operands("mul_mat", dst, "x rows must be 16-byte aligned");
}

// x as fp16 (bf16 for BF16 weights) rows of K at the start of scratch;
// returns the bytes they take there, rounded up to 256.
size_t convert_x(const Tensor& x, int64_t K, int64_t T, bool bf16, const OpCtx& c) {
  const unsigned grid = unsigned(std::min<int64_t>(blocks_for(T * K, 256), int64_t(c.sm_count) * 16));
  if (bf16)
    launch_kernel(convert_x_kernel<__nv_bfloat16>, grid, 256, 0, c.launch_stream(), rows_of(x), K, T,
                  static_cast<__nv_bfloat16*>(c.scratch));
  else
    launch_kernel(convert_x_kernel<__half>, grid, 256, 0, c.launch_stream(), rows_of(x), K, T,
                  static_cast<__half*>(c.scratch));
  WEIR_CUDA_CHECK_LAUNCH();
  return (size_t(T * K * 2) + 255) / 256 * 256;
}

// The tile kernel on products dsts[0..n) of the same x.
void tile_products(const Tensor* const* dsts, int n, const OpCtx& c) {
  const Tensor& dst = *dsts[0];
  if (mul_mat_scratch_bytes(dst, c.options()) > c.scratch_bytes) bad_operands("mul_mat", dst, "scratch too small");
  bool mma = true;
  for (int j = 0; j < n; ++j) mma = mma && mma_tile_fits(*dsts[j], c.options());
  const int64_t K = dst.src[0]->ne[0], T = dst.n_rows();
  const size_t xb = mma ? mma_convert_x(*dst.src[1], K, T, c) : convert_x(*dst.src[1], K, T, false, c);
  (mma ? mma_tile_mul_mat : tile_mul_mat)(dsts, n, c, static_cast<const __half*>(c.scratch),
                                          static_cast<char*>(c.scratch) + xb, c.scratch_bytes - xb);
}

}  // namespace

void op_mul_mat_group(const Tensor* const* dsts, int n, const OpCtx& c) {
  for (int i = 0; i < n; ++i) check(*dsts[i]);
  if (uses_tile(*dsts[0], c.options())) return tile_products(dsts, n, c);
  if (!has_q8_mat_vec(dsts[0]->src[0]->dtype)) return vec_products(dsts, n, c);
  q8_mat_vec(dsts, n, c);
}

void op_mul_mat_add_norm(const Tensor& product, const Tensor& add, const Tensor& norm, const Tensor& mul,
                          const OpCtx& c) {
  check(product);
  if (!vec_can_defer_norm(product, add, norm, mul)) return q8_mat_vec_add_norm(product, add, norm, mul, c);
  if (c.x_from == ActivationSource::DeferredNorm)
    bad_operands("mul_mat", product, "reads the deferred norm it would write");
  const Tensor& r = add.src[0] == &product ? *add.src[1] : *add.src[0];
  VecEnds e;
  if (!c.deferred_norm || deferred_norm_bytes(product) > c.deferred_norm_capacity)
    bad_operands("mul_mat", product, "no memory for a deferred norm");
  const int64_t n = vec_blocks(product, c);
  e.add_norm = VecAddOut{rows_of(r),
                     rows_of(add),
                     rows_of(mul),
                     static_cast<const float*>(mul.src[1]->data),
                     static_cast<float*>(c.deferred_norm),
                     int((n + 3) / 4 * 4)};
  const Tensor* one[1] = {&product};
  vec_products(one, 1, c, e);
}

void op_mul_mat_glu(const Tensor& a, const Tensor& b, const Tensor& glu, const OpCtx& c) {
  check(a), check(b);
  if (can_fuse_vec_glu(a, b, glu)) {
    const Tensor* mats[2] = {glu.src[0], glu.src[1]};  // gate first
    VecEnds e;
    e.glu = VecGlu{static_cast<float*>(glu.data), int64_t(glu.nb[1] / 4), glu.op == Op::GeluMul};
    return vec_products(mats, 2, c, e);
  }
  q8_mat_vec_glu(a, b, glu, c);
}

void op_mul_mat(const Tensor& dst, const OpCtx& c) {
  check(dst);
  const Tensor& W = *dst.src[0];
  const Tensor& x = *dst.src[1];
  const int64_t K = W.ne[0], N = W.ne[1], T = dst.n_rows();
  if (T == 0 || N == 0) return;
  if (uses_vec(dst, c.options())) {
    if (has_q8_mat_vec(W.dtype)) {
      const Tensor* one[1] = {&dst};
      return q8_mat_vec(one, 1, c);
    }
    const Tensor* one[1] = {&dst};
    return vec_products(one, 1, c);
  }
  if (mul_mat_scratch_bytes(dst, c.options()) > c.scratch_bytes) bad_operands("mul_mat", dst, "scratch too small");
  if (uses_tile(dst, c.options())) {
    const Tensor* one[1] = {&dst};
    return tile_products(one, 1, c);
  }
  const float one = 1.0f, zero = 0.0f;
  float* y = static_cast<float*>(dst.data);
  const int ldy = int(dst.nb[1] / 4);
  if (W.dtype == DType::F32) {  // y (N x T, column-major) = W^T (N x K) x (K x T)
    if (!x.is_contiguous()) bad_operands("mul_mat", dst, "F32 weights need contiguous x");
    WEIR_CUDA_CHECK(cublasSgemm(c.cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(T), int(K), &one,
                                static_cast<const float*>(W.data), int(W.nb[1] / 4), static_cast<const float*>(x.data),
                                int(x.nb[1] / 4), &zero, y, ldy));
    return;
  }
  const bool bf16 = W.dtype == DType::BF16;
  void* xh = c.scratch;
  const size_t xb = convert_x(x, K, T, bf16, c);
  const cudaDataType_t ht = bf16 ? CUDA_R_16BF : CUDA_R_16F;
  if (W.dtype == DType::F16 || bf16) {
    WEIR_CUDA_CHECK(cublasGemmEx(c.cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(T), int(K), &one, W.data, ht,
                                 int(W.nb[1] / 2), xh, ht, int(K), &zero, y, CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
    return;
  }
  auto* wh = reinterpret_cast<__half*>(static_cast<char*>(c.scratch) + xb);
  const int64_t slice = int64_t(slice_rows(dst));
  for (int64_t n0 = 0; n0 < N; n0 += slice) {
    const int64_t n = std::min(slice, N - n0);
    const auto* w = static_cast<const uint8_t*>(W.data) + size_t(n0) * W.nb[1];
    const unsigned g = unsigned(std::min<int64_t>(blocks_for(n * K / 8, 256), int64_t(c.sm_count) * 16));
    const bool ok = dispatch_dtype(W.dtype, [&]<DType WT>() {
      launch_kernel(dequant_f16_kernel<WT>, g, 256, 0, c.launch_stream(), w, W.nb[1], K, n, wh);
    });
    if (!ok) bad_operands("mul_mat", dst, std::string("no GPU kernel for W type ") + dtype_name(W.dtype));
    WEIR_CUDA_CHECK_LAUNCH();
    WEIR_CUDA_CHECK(cublasGemmEx(c.cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(T), int(K), &one, wh, CUDA_R_16F,
                                 int(K), xh, CUDA_R_16F, int(K), &zero, y + n0, CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace weir::cuda
