// What a decode product launch does with its rows besides storing them,
// shared by the 8-bit kernels (ops_mul_mat_q8.cu) and the float kernel
// (ops_mul_mat.cu): divide them by a deferred norm's rms (the readers' side
// of mul_mat_q8.h's deferred norm), and give them to rope / set_rows jobs.
#pragma once
#include <cstdint>

#include "backend/cuda/cluster_ptx.cuh"
#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/product_group.cuh"
#include "backend/cuda/rope_job.cuh"

namespace weir::cuda {

// The residual norm deferred to the products that read it (mul_mat_q8.h says
// why). The readers' side: ss null, none; else their results are scaled by
// 1 / sqrt(sum(ss[t][0..n)) / k + eps), the partials summed in a fixed order.
struct DeferredNormIn {
  const float* ss;
  int n;
  float k, eps;
};

// This lane's share of token t's sum of squares (loaded early: used at the end).
template <int TOKENS>
__device__ __forceinline__ void norm_partials(const DeferredNormIn& f, int lane, float (&ss)[TOKENS]) {
#pragma unroll
  for (int t = 0; t < TOKENS; ++t) {
    ss[t] = 0.0f;
    if (f.ss)
      for (int j = lane; j < f.n; j += 32) ss[t] += f.ss[t * f.n + j];
  }
}

// The rows' partial sums (every lane's) times 1 / rms, token by token.
template <int TOKENS, int R>
__device__ __forceinline__ void deferred_norm_scale(const DeferredNormIn& f, const float (&ss)[TOKENS],
                                                    float (&acc)[R][TOKENS]) {
  if (!f.ss) return;
#pragma unroll
  for (int t = 0; t < TOKENS; ++t) {
    const float inv = 1.0f / sqrtf(warp_sum(ss[t]) / f.k + f.eps);
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r][t] *= inv;
  }
}

// The products' rows given to rope / set_rows jobs (rope_job.cuh), one
// job a product, instead of stored: q and k roped (k into the KV cache), v
// written into its cache, by the launch that computes them. A rope takes a
// warp's two rows as a pair (rows 2i and 2i + 1: the normal mode).
struct ProductJobs {
  RopeJob j[kMaxMats];
};

// The job of the warp's rows (row0: the first) and its row in the job's input.
__device__ __forceinline__ const RopeJob& job_of(const Mats& m, const ProductJobs& jobs, int64_t row0, int64_t* l) {
  int mi;
  which(m, row0, &mi, l);
  return jobs.j[mi == 0 ? 0 : mi == 1 ? 1 : 2];
}

// A rope job's sin and cos for the warp's pair, by token: computed before
// the dot products, not after them (the positions and the frequency factors
// are two dependent loads: at the end they made the launch 2 us longer).
template <int TOKENS>
__device__ __forceinline__ void job_angles(const Mats& m, const ProductJobs& jobs, int64_t row0, float (&s)[TOKENS],
                                           float (&c)[TOKENS]) {
  int64_t l;
  const RopeJob& J = job_of(m, jobs, row0, &l);
#pragma unroll
  for (int t = 0; t < TOKENS; ++t) {
    s[t] = 0.0f, c[t] = 1.0f;
    if (J.rope) rope_angle(J.pos[t], int(l % J.D) / 2, J.theta_scale, J.freq_scale, J.ff, &s[t], &c[t]);
  }
}

// The warp's row sums (R rows from row0, summed across the warp) to its job.
template <int TOKENS, int R>
__device__ __forceinline__ void run_jobs(const float (&acc)[R][TOKENS], const Mats& m, int64_t row0,
                                         const ProductJobs& jobs, const float (&s)[TOKENS], const float (&co)[TOKENS]) {
  int64_t l;
  const RopeJob& J = job_of(m, jobs, row0, &l);
#pragma unroll
  for (int t = 0; t < TOKENS; ++t) {
    if (J.rope) {
      if constexpr (R == 2) {
        const int64_t h = l / J.D;
        const int a = int(l % J.D);
        put(J, t, h, a, acc[0][t] * co[t] - acc[1][t] * s[t]);
        put(J, t, h, a + 1, acc[0][t] * s[t] + acc[1][t] * co[t]);
      }
    } else {
#pragma unroll
      for (int r = 0; r < R; ++r) put(J, t, 0, l + r, acc[r][t]);
    }
  }
}

// The same into an 8-bit cache (RopeJob::q8): 32 rows, one 32-element
// block of a head (whole blocks: can_run_row_jobs), are a launch block of
// 16 warps, or a cluster of 32 / (2 WARPS) blocks (the launch in clusters of
// that size); every warp's two values (roped, or as they are) go through
// shared memory, then warp t of the first block writes token t's block
// (reading the others' through distributed shared memory). Every thread of
// the launch block calls it, its acc summed across each warp's lanes.
template <int TOKENS, int WARPS>
__device__ __forceinline__ void run_jobs_q8(const float (&acc)[2][TOKENS], const Mats& m, int64_t row0,
                                            const ProductJobs& jobs, const float (&s)[TOKENS],
                                            const float (&co)[TOKENS]) {
  constexpr int RB = 2 * WARPS, JC = 32 / RB;  // rows a launch block, blocks a 32-row block
  static_assert(JC * RB == 32, "launch blocks tile a 32-element block");
  __shared__ float sh[TOKENS][RB];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int64_t l;
  const RopeJob& J = job_of(m, jobs, row0, &l);
  if (lane == 0)
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) {
      sh[t][2 * warp] = J.rope ? acc[0][t] * co[t] - acc[1][t] * s[t] : acc[0][t];
      sh[t][2 * warp + 1] = J.rope ? acc[0][t] * s[t] + acc[1][t] * co[t] : acc[1][t];
    }
  if constexpr (JC > 1)
    cluster_sync();
  else
    __syncthreads();
  const unsigned rank = JC > 1 ? cluster_rank() : 0;
  if (rank == 0 && warp < TOKENS) {
    const float v = JC > 1 ? *cluster_peer(&sh[warp][lane % RB], unsigned(lane / RB)) : sh[warp][lane];
    const RopeJob& B = job_of(m, jobs, int64_t(blockIdx.x) / JC * 32, &l);
    put_q8<1>(B, warp, B.rope ? l / B.D : 0, (B.rope ? l % B.D : l) + lane, {v});
  }
  if constexpr (JC > 1) cluster_sync();  // the first block has read the others' values: they may leave
}

}  // namespace weir::cuda
