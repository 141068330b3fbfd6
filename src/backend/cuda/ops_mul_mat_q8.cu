// Decode products on 8-bit activations: x is quantized per 32 elements
// (scale d and d * sum of the quants, as llama.cpp's Q8_1) into two arrays,
// the int8 quants ([T][K], so 16 of them are one aligned 16-byte load) and
// the (d, d * sum) pairs ([T][K/32]); each weight type's quants meet them in
// 4-way int8 dot products (dp4a).
//
// A thread takes a chunk of a weight row at a time: 32 weights of a legacy
// block (q4_0, q5_0, q8_0, iq4_nl, mxfp4) or 16 quant bytes of a K-quant or
// iq4_xs super-block (32 or 64 weights), read with as few wide loads as the
// format's alignment allows: K-quant blocks of 144 and 176 bytes are 16-byte
// aligned, iq4_xs's of 136 8-byte aligned; the others (18, 22, 34, 210
// bytes) only 2-byte aligned and mxfp4's (17) not at all, read as aligned
// 32-bit words joined by funnel shifts. The lookup types' quants become
// their table's int8 values by byte permutes (dequant.cuh: lookup4). Offsets the format keeps apart (q4_0's -8,
// q5_0's -16, the K-quants' mins) go through the x block's sum; where a chunk
// covers half of an x block and both halves share the block's factors
// (q4_K, q5_K), each half takes half the sum.
//
// A warp takes R weight rows (2 up to 4 tokens; 4 where it applies a GLU:
// gate and up rows j, j + 1) so that each load of x serves R rows: x loads
// from L1, not DRAM, were what limited these kernels (Nsight Compute: L1 at
// 88% of its throughput, DRAM at 42%). WARPS_PER_ROW warps per row group
// (more for short matrices, so enough warps are in flight to cover the memory
// latency); threads walk their chunks U at a time, all U chunks of all R rows
// loaded before the first dot product, and the first step's loads issued
// before pdl_wait() (weights no kernel writes), so they overlap the end of
// the kernel ahead; the rows' sums are combined by warp shuffles and, across
// warps, in shared memory.
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/cluster_ptx.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/glu.cuh"
#include "backend/cuda/mul_mat_q8.h"
#include "backend/cuda/product_ends.cuh"
#include "backend/cuda/product_group.cuh"
#include "backend/cuda/q8_act.cuh"
#include "backend/cuda/q8_dot.cuh"
#include "backend/cuda/rope_job.cuh"
#include "backend/cuda/tensor_map.h"

namespace weir::cuda {
namespace {

constexpr int kWarps = 4;

// One warp per 32-element block of x: lane l quantizes element l.
__global__ void quantize_x_kernel(Rows x, int64_t K, int64_t T, Q8Act out) {
  pdl_wait();
  const int64_t nb = K / 32;
  const int64_t b = int64_t(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (b >= nb * T) return;
  const int64_t t = b / nb, kb = b % nb;
  q8_store_block(out, t, kb, reinterpret_cast<const float*>(x.row(t))[kb * 32 + (threadIdx.x & 31)]);
}

// The add+norm launch, the writer of a deferred norm (mul_mat_q8.h): s =
// W a + r (the residual stream) written, the 8-bit blocks of s * w (w: the
// norm's weights) and each block's sum of squares of s.
struct AddNormOut {
  Rows r, s;
  const float* w;
  Q8Act q8;
  float* ss;
};

// The products' rows given to rope / set_rows jobs instead of stored
// (product_ends.cuh).
struct RowJobs : ProductJobs {
  bool on;
  DeferredNormIn norm_in;  // its ss may be null
};
// A reader of a deferred norm: its rows divided by the rms, then stored.
struct NormScaled {
  DeferredNormIn norm_in;
};
// The GLU applied by the gate/up launch (mul_mat_q8.h): 32 outputs a block,
// written only as 8-bit blocks (q8) for the product after it.
struct GluOut {
  Q8Act q8;
  bool gelu;   // else silu
  DeferredNormIn norm_in;  // its ss may be null
};

struct Plain {};

// Staged weights (bulk_copy.cuh): the block's rows stream through shared
// memory in slices of SB blocks of each row, `stages` slices deep, each
// slice of the block's rows one 2-D bulk copy (a box of a tensor map of the
// matrix) landing on the stage's barrier; the warps compute from shared
// memory. The bytes in flight are then the stages' (tens of KB a block),
// not what the warps' registers hold while they also compute (Nsight
// Compute: the register kernels' warps waited on memory with their next
// loads not yet issued: gate/up at 2.1 TB/s of 3.0). The first `stages`
// slices are asked for before pdl_wait() where the weights are fixed, so a
// launch's weights arrive while the kernel ahead finishes.
constexpr int kMaxStages = 8;
template <class D>
constexpr int slice_blocks() {  // SB: 32 chunks a row (q6_K: 64, for a 16-byte multiple)
  return D::CHUNKS == 1 ? 32 : D::BYTES % 16 ? 8 : 4;
}
// A launch's tensor maps (one a matrix) and stages.
struct Staging {
  CUtensorMap map[kMaxMats];
  int stages;
  uint32_t slot;   // bytes a row's slice takes: SB x BYTES
  uint32_t bytes;  // a stage's: the block's rows' slices
};
extern __shared__ __align__(128) uint8_t q8_stage_mem[];
// A stage's buffer: 128-byte aligned (the copy unit's boxes).
__device__ __forceinline__ uint8_t* stage_buffer(const Staging& st, int s) {
  const uint32_t a = smem_u32(q8_stage_mem);
  return q8_stage_mem + ((a + 127) / 128 * 128 - a) + size_t(s) * st.bytes;
}

// Slice j of the block's rows (matrix mi's, from row0) into stage
// j % stages (one thread).
template <class D>
__device__ __forceinline__ void stage_slice(const Staging& st, int mi, int row0, int j, uint64_t* full) {
  const int s = j % st.stages;
  mbar_arrive_expect(&full[s], st.bytes);
  tensor_copy_2d(stage_buffer(st, s), &st.map[mi], j * (slice_blocks<D>() * D::BYTES / 8), row0, &full[s]);
}

// early: W is written by no kernel of the graph, so the first step's
// weights are loaded before pdl_wait(), while the kernel ahead finishes.
// WARPS warps a block; ADD_NORM: the writer of a deferred norm (32 rows a
// block, one 8-bit block of the next product's x).
// The end of a launch (Epilogue): Plain stores the rows' sums; NormScaled
// divides them by the rms first (a deferred norm's reader); AddNormOut (32
// rows a block) and RowJobs as above. A type, not a runtime switch, so the
// plain launches (most of them) run the code they ran before the others came
// (H100: the extra parameters and the reader's runtime test in every launch
// made gemma3-270m decode 4% slower). STAGED: weights through shared memory
// (above; WARPS_PER_ROW 1).
// KS > 1: the launch's blocks are thread-block clusters of KS blocks
// (blockIdx.x / KS: the row group), each block taking every KS-th run of 32
// WARPS_PER_ROW chunks of its rows (the cluster's blocks as one block of KS
// times the threads); ADD_NORM only: the partial row sums meet in the first
// block's shared memory (distributed shared memory, added in rank order),
// which adds the residual and writes the deferred norm.
template <class D, int TOKENS, int WARPS_PER_ROW, int WARPS, class Epilogue, int CHUNKS_A_STEP = 0, bool STAGED = false,
          int KS = 1>
__device__ __forceinline__ void mat_vec(const Mats& m, int64_t K, const QuantizedX& xq, bool early, const Epilogue& epi,
                                        const Staging* st = nullptr) {
  constexpr bool ADD_NORM = std::is_same_v<Epilogue, AddNormOut>, JOBS = std::is_same_v<Epilogue, RowJobs>;
  constexpr bool GLU = std::is_same_v<Epilogue, GluOut>;
  constexpr bool SCALED = JOBS || GLU || std::is_same_v<Epilogue, NormScaled>;
  // GLU: a warp takes gate rows j, j + 1 and up rows j, j + 1 (one step of
  // one chunk a row holds as many loads in flight as two of two rows).
  constexpr int R = GLU ? 4 : rows_per_warp(TOKENS);
  // U chunks a thread a step: 4 lost 6-11% to 2 (fewer warps fit), H100; a
  // GLU warp's 4 rows take 1 (2: 8B Q4_K_M -2.7%, 1B Q4_0 +2.1%; 4 in the
  // add+norm launch: 8B Q4_K_M -8%).
  constexpr int kRowsPerBlock = WARPS / WARPS_PER_ROW * R, kThreadsPerRow = 32 * WARPS_PER_ROW * KS;
  constexpr int U = CHUNKS_A_STEP ? CHUNKS_A_STEP : GLU ? 1 : 2;
  static_assert(!ADD_NORM || kRowsPerBlock == 32, "an add+norm block makes one 32-element block of x");
  static_assert(!GLU || (WARPS_PER_ROW == 1 && WARPS == 16), "a GLU block makes one 32-element block of x");
  // Staged: the plain and scaled ends (the others ran slower staged; the
  // GLU's gate/up pairs and the jobs' row pairs would need their own maps).
  static_assert(!STAGED || (WARPS_PER_ROW == 1 && !ADD_NORM && !GLU && !JOBS),
                "staged: whole rows a warp, plain or scaled ends");
  static_assert(KS == 1 || (ADD_NORM && !STAGED), "clusters of blocks a row group: the add+norm launches");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t grp = int64_t(blockIdx.x) / KS;  // the block's row group (its cluster's, KS > 1)
  const int rank = KS > 1 ? int(blockIdx.x % KS) : 0;
  const int64_t row0 = grp * kRowsPerBlock + int64_t(warp / WARPS_PER_ROW) * R;
  const int sub = (rank * WARPS_PER_ROW + warp % WARPS_PER_ROW) * 32 + lane;
  const uint8_t* w[R];
  float* y[R];
  int64_t ldy[R];
  bool live[R];
  if constexpr (GLU) {  // gate is m.w[0], up m.w[1], of as many rows (a multiple of 32)
    const int64_t j = grp * 32 + 2 * warp;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      live[r] = true, y[r] = nullptr, ldy[r] = 0;
      w[r] = m.w[r / 2] + size_t(j + r % 2) * m.stride[r / 2];
    }
  } else {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      live[r] = row0 + r < m.total;
      locate(m, live[r] ? row0 + r : 0, &w[r], &y[r], &ldy[r]);  // a dead row reads row 0, never stored
    }
  }
  const int64_t nb = K / D::QK, chunks = nb * D::CHUNKS;
  // A step: U chunks a thread, every one loaded first (past the end: the
  // last chunk again, loaded but not used), then the dot products.
  typename D::Raw raw[U][R];
  const auto load_step = [&](int64_t i0) {
#pragma unroll
    for (int k = 0; k < U; ++k) {
      const int64_t i = min(i0 + int64_t(k) * kThreadsPerRow, chunks - 1), blk = i / D::CHUNKS;
#pragma unroll
      for (int r = 0; r < R; ++r) D::load(w[r] + blk * D::BYTES, int(i % D::CHUNKS), raw[k][r]);
    }
  };
  // Staged: the stage barriers; thread 0 asks for the slices, of matrix
  // mi's rows from mrow (a block's rows lie in one matrix).
  constexpr int SB = slice_blocks<D>();
  __shared__ uint64_t full[STAGED ? kMaxStages : 1];
  const int nslices = STAGED ? int((nb + SB - 1) / SB) : 0;
  int mi = 0, mrow = 0;
  const auto produce_first = [&] {
    if (threadIdx.x == 0)
      for (int j = 0; j < min(st->stages, nslices); ++j) stage_slice<D>(*st, mi, mrow, j, full);
  };
  if constexpr (STAGED) {
    int64_t local;
    which(m, int64_t(blockIdx.x) * kRowsPerBlock, &mi, &local);
    mrow = int(local);
    if (threadIdx.x == 0) {
      for (int s = 0; s < st->stages; ++s) mbar_init(&full[s], 1);
      mbar_init_fence();
    }
    __syncthreads();
    if (early) produce_first();
  }
  const bool preloaded = !STAGED && early && live[0];
  if (preloaded) load_step(sub);
  float wn = 0.0f;  // ADD_NORM: this lane's norm weight (no kernel writes it)
  if constexpr (ADD_NORM)
    if (rank == 0) wn = epi.w[grp * 32 + lane];
  pdl_wait();
  if constexpr (STAGED)
    if (!early) produce_first();
  float resid = 0.0f;  // ADD_NORM: warp t < TOKENS adds token t's residual, loaded now
  if constexpr (ADD_NORM)
    if (warp < TOKENS && rank == 0) resid = reinterpret_cast<const float*>(epi.r.row(warp))[grp * 32 + lane];
  float ss[TOKENS];  // a deferred norm's x: this lane's share of the sum of squares
  if constexpr (SCALED) norm_partials<TOKENS>(epi.norm_in, lane, ss);
  float js[TOKENS], jc[TOKENS];  // row jobs: the rope's angle
  if constexpr (JOBS)
    if (live[0]) job_angles<TOKENS>(m, epi, row0, js, jc);
  float acc[R][TOKENS];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) acc[r][t] = 0.0f;
  if constexpr (STAGED) {
    // Each chunk loaded from shared memory just before its dot products (a
    // short latency the other warps cover; fewer registers). Row r of the
    // warp is row warp * R + r of a stage.
    for (int j = 0; j < nslices; ++j) {
      const int s = j % st->stages;
      mbar_wait(&full[s], uint32_t(j / st->stages) & 1);
      if (live[0]) {
        const uint8_t* base = stage_buffer(*st, s);
        const int64_t b0 = int64_t(j) * SB;
        const int here = int(min(int64_t(SB), nb - b0)) * D::CHUNKS;
#pragma unroll
        for (int k = 0; k < SB * D::CHUNKS / 32; ++k) {
          const int i = lane + 32 * k;
          if (i < here) {
            typename D::Raw one[R];
#pragma unroll
            for (int r = 0; r < R; ++r)
              D::load(base + size_t(warp * R + r) * st->slot + (i / D::CHUNKS) * D::BYTES, i % D::CHUNKS, one[r]);
            D::template dot<TOKENS, R>(one, i % D::CHUNKS, xq, (b0 + i / D::CHUNKS) * D::QK, acc);
          }
        }
      }
      __syncthreads();  // the stage is free again
      if (threadIdx.x == 0 && j + st->stages < nslices) stage_slice<D>(*st, mi, mrow, j + st->stages, full);
    }
  } else if (live[0]) {
    for (int64_t i0 = sub; i0 < chunks; i0 += kThreadsPerRow * U) {
      if (!preloaded || i0 != sub) load_step(i0);
#pragma unroll
      for (int k = 0; k < U; ++k) {
        const int64_t i = i0 + int64_t(k) * kThreadsPerRow;
        if (i < chunks) D::template dot<TOKENS, R>(raw[k], int(i % D::CHUNKS), xq, i / D::CHUNKS * D::QK, acc);
      }
    }
  }
  if constexpr (SCALED) deferred_norm_scale<TOKENS, R>(epi.norm_in, ss, acc);
  if constexpr (ADD_NORM) {
    // The block's 32 rows: the sum with the residual, then lane l of warp t
    // quantizes element l of token t's block.
    __shared__ float sy[TOKENS][32];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < TOKENS; ++t) {
        const float v = warp_sum(acc[r][t]);
        if (lane == 0) sy[t][warp * R + r] = v;
      }
    float part = 0.0f;  // warp t < TOKENS: row lane's sum, token t (the cluster's, KS > 1)
    if constexpr (KS > 1) {
      cluster_sync();  // every block's sy written
      if (warp < TOKENS && rank == 0) {
        float p[KS];  // every block's loads in flight at once
#pragma unroll
        for (int k = 0; k < KS; ++k) p[k] = *cluster_peer(&sy[warp][lane], unsigned(k));
#pragma unroll
        for (int k = 0; k < KS; ++k) part += p[k];
      }
      cluster_sync();  // the others' sy are read: they may leave
      if (rank != 0) return;
    } else {
      __syncthreads();
      if (warp < TOKENS) part = sy[warp][lane];
    }
    if (warp < TOKENS) {
      const int64_t row = grp * 32 + lane;
      const float v = part + resid;
      reinterpret_cast<float*>(const_cast<char*>(epi.s.row(warp)))[row] = v;
      const float sq = warp_sum(v * v);
      q8_store_block(epi.q8, warp, grp, v * wn);
      if (lane == 0) epi.ss[int64_t(warp) * (gridDim.x / KS) + grp] = sq;
    }
  } else if constexpr (GLU) {
    // h = act(gate) * up for the warp's two outputs, then lane l of warp t
    // quantizes element l of token t's block.
    __shared__ float sh[TOKENS][32];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < TOKENS; ++t) acc[r][t] = warp_sum(acc[r][t]);
    if (lane < 2) {
#pragma unroll
      for (int t = 0; t < TOKENS; ++t) {
        const float g = lane ? acc[1][t] : acc[0][t], u = lane ? acc[3][t] : acc[2][t];
        sh[t][2 * warp + lane] = epi.gelu ? GeluMulF{}(g, u) : SiluMulF{}(g, u);
      }
    }
    __syncthreads();
    if (warp < TOKENS) q8_store_block(epi.q8, warp, grp, sh[warp][lane]);
  } else if constexpr (JOBS) {
    if constexpr (WARPS_PER_ROW == 1 && R == 2 && 32 % (2 * WARPS) == 0 && KS == 1) {  // an 8-bit cache's blocks
      int64_t l;
      if (job_of(m, epi, row0, &l).q8) {  // (the same for the whole block: its rows lie in one block of a job)
        reduce_row_sums<TOKENS, WARPS_PER_ROW, WARPS, R>(acc, warp, lane);
        return run_jobs_q8<TOKENS, WARPS>(acc, m, row0, epi, js, jc);
      }
    }
    if (reduce_row_sums<TOKENS, WARPS_PER_ROW, WARPS, R>(acc, warp, lane) && live[0])
      run_jobs<TOKENS, R>(acc, m, row0, epi, js, jc);
  } else {
    store_row_sums<TOKENS, WARPS_PER_ROW, WARPS, R>(acc, warp, lane, live, y, ldy);
  }
}
template <class D, int TOKENS, int WARPS_PER_ROW, int WARPS, class Epilogue>
__global__ void __launch_bounds__(32 * WARPS)
    q8_mat_vec_kernel(Mats m, int64_t K, QuantizedX xq, bool early, Epilogue epi) {
  mat_vec<D, TOKENS, WARPS_PER_ROW, WARPS, Epilogue>(m, K, xq, early, epi);
}
// The same with registers capped so that 6 blocks of 4 warps fit a SM: for
// a grid that takes a second wave of blocks at the registers the compiler
// would pick (kernel_fits_one_wave).
template <class D, int TOKENS, int WARPS_PER_ROW, int WARPS, class Epilogue>
__global__ void __launch_bounds__(32 * WARPS, 6)
    q8_mat_vec_capped_kernel(Mats m, int64_t K, QuantizedX xq, bool early, Epilogue epi) {
  mat_vec<D, TOKENS, WARPS_PER_ROW, WARPS, Epilogue>(m, K, xq, early, epi);
}
// An add+norm launch of one token with half the SMs or fewer (1B: 64 blocks
// on 132) and rows of two such steps or more: four chunks a thread a step,
// twice the loads in flight a warp, where nothing else would use the
// registers and they do not spill (q5_K and q6_K would). H100 tg128, 1B
// Q4_0: +2.7% (down 8.7 -> 7.7 us; its o product, one step, was 0.2 us
// slower, so short rows keep two chunks); all add+norm launches: 8B Q4_K_M -8%.
// WEIR_CUDA_ADD_NORM_DEEP=0: never (for comparisons).
template <class D>
__global__ void __launch_bounds__(512)
    q8_add_norm_deep_kernel(Mats m, int64_t K, QuantizedX xq, bool early, AddNormOut epi) {
  mat_vec<D, 1, 1, 16, AddNormOut, 4>(m, K, xq, early, epi);
}

// An add+norm launch split in K over clusters of KS blocks
// (mat_vec): the launches of few row groups (1B: 64 groups of 32 rows on 132
// SMs) on all the SMs, no partial sums through global memory (split K
// through memory and a last block lost, docs/perf.md: a round trip at the
// end and the next launch's early loads pushed off the idle SMs).
// U chunks a thread a step (4: the deep kernel's, below); MINB blocks an
// SM asked of the compiler (2: registers capped at 64).
template <class D, int TOKENS, int KS, int U, int MINB = 1>
__global__ void __launch_bounds__(512, MINB)
    q8_add_norm_split_k_kernel(Mats m, int64_t K, QuantizedX xq, bool early, AddNormOut epi) {
  mat_vec<D, TOKENS, 1, 16, AddNormOut, U, false, KS>(m, K, xq, early, epi);
}

// The GLU launch of one token, two blocks a SM: registers capped at 64.
// q4_0 takes 63 by itself; q4_K took 74, so one block of 16 warps ran a SM
// and 8B Q4_K_M decode was 5% slower than with the GLU kernel. (Asking for
// at least one block a SM is not the same as asking for nothing: it gave
// q4_0 78 registers and every product kernel more; H100, same call: 1B
// Q4_0 decode -3.6%, 8B Q4_K_M -1.2%, 8B Q4_0 +1.6%.) q5_K and q6_K would
// spill: the plain kernel.
template <class D>
constexpr bool glu_two_blocks() {
  return std::is_same_v<D, DotQ4_0> || std::is_same_v<D, DotQ5_0> || std::is_same_v<D, DotQ8_0> ||
         std::is_same_v<D, DotQK45<false>> || std::is_same_v<D, DotIQ4NL> || std::is_same_v<D, DotIQ4XS> ||
         std::is_same_v<D, DotMXFP4>;
}
template <class D>
__global__ void __launch_bounds__(512, 2) q8_glu_kernel(Mats m, int64_t K, QuantizedX xq, bool early, GluOut epi) {
  mat_vec<D, 1, 1, 16, GluOut>(m, K, xq, early, epi);
}

// Weights staged through shared memory (mat_vec, STAGED): 16 warps a
// block, a warp R rows; MINB blocks a SM asked of the compiler.
template <class D, int TOKENS, class Epilogue, int MINB>
__global__ void __launch_bounds__(512, MINB)
    q8_staged_kernel(Mats m, int64_t K, QuantizedX xq, bool early, Epilogue epi, const __grid_constant__ Staging st) {
  mat_vec<D, TOKENS, 1, 16, Epilogue, 0, true>(m, K, xq, early, epi, &st);
}

// Warps per row: enough warps in flight to fill the GPU several times over,
// while each thread-row keeps several chunks of work (1, 2 or 4).
int warps_per_row(int64_t warp_rows, int64_t chunks, int sm_count, int decode_warps_per_sm) {
  // 16 per SM (H100, tg128): fewer, longer warps, more of them resident
  // early enough to load before the kernel ahead ends. With the first step
  // loaded before pdl_wait(), 24 beat 48 (8B q4_K +3.0%, 1B q4_0 +0.9%,
  // gemma3-270m +0.4%; 16 then: 8B +3.3%, 1B -0.8%); with the norm deferred
  // and the GLU fused, 16 beats 24 (8B Q4_K_M +2.3%, 1B Q4_0 +0.1%; 40:
  // -2.2%, -0.5%; same call): the q/k/v launch takes one warp a row pair.
  const int64_t want = int64_t(sm_count) * mat_vec_warps_per_sm(16, decode_warps_per_sm);
  int wpr = 1;
  while (wpr < kWarps && warp_rows * wpr < want && chunks >= int64_t(64) * wpr) wpr *= 2;
  return wpr;
}

// A launch's operands past the weights: x, and the deferred norm's sides.
struct Launch {
  Mats m;
  int64_t K;
  QuantizedX xq;
  DeferredNormIn norm_in;
  AddNormOut add_norm;  // its ss null: not an add+norm launch
  RowJobs jobs;  // on: the rows go to jobs
  GluOut glu;    // its q8.q null: no GLU
};

// Staged launches (mat_vec, STAGED) where the GPU has bulk copies: by
// default only for launches of many waves of blocks (the output matrix:
// H100, 8B q6_K 161.7 -> 150.7 us); the others ran slower staged than from
// registers (the copy unit moved ~15 GB/s an SM in boxes of 576-byte rows,
// 2/3 of an SM's share of the memory's bandwidth; docs/perf.md).
// CudaOptions::staged 0: never; 1: every plain or scaled launch it can take.
enum class StagedMode { Never, Big, Always };
StagedMode staged_mode(const CudaOptions& o) {
  if (!bulk_copy_supported() || o.staged == 0) return StagedMode::Never;
  return o.staged == 1 ? StagedMode::Always : StagedMode::Big;
}

// The device's shared memory: the most a block may ask for, an SM's, and
// what the system keeps a block.
struct SmemLimits {
  int per_block = 0, per_sm = 0, reserved = 0;
};
const SmemLimits& smem_limits() {
  static const SmemLimits l = [] {
    SmemLimits r;
    int dev = 0;
    WEIR_CUDA_CHECK(cudaGetDevice(&dev));
    WEIR_CUDA_CHECK(cudaDeviceGetAttribute(&r.per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    WEIR_CUDA_CHECK(cudaDeviceGetAttribute(&r.per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    WEIR_CUDA_CHECK(cudaDeviceGetAttribute(&r.reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev));
    return r;
  }();
  return l;
}

// The staged launch of Epilogue's product: as many stages as fit the shared
// memory of the blocks an SM is to hold at once (2 where the grid has more
// blocks than SMs and the registers allow, else 1), at most one a slice of
// a row. False where not even one stage fits (the caller then launches the
// register kernel).
template <class D, int TOKENS, class Epilogue>
bool launch_staged(const Launch& l, const OpCtx& c, bool early, const Epilogue& epi) {
  constexpr int R = rows_per_warp(TOKENS), kRows = 16 * R, SB = slice_blocks<D>();
  // Two blocks a SM (64 registers) where that spills nothing (ptxas -v):
  // not for 3 tokens and more.
  constexpr int MINB = TOKENS <= 2 ? 2 : 1;
  constexpr auto kernel = q8_staged_kernel<D, TOKENS, Epilogue, MINB>;
  static_assert(SB * D::BYTES % 16 == 0, "a slice must be a whole number of 16-byte units");
  const uint32_t slot = uint32_t(SB * D::BYTES), box_rows = kRows;
  const int64_t row_bytes = l.K / D::QK * D::BYTES;
  // One box a matrix and slice; a block's rows may not straddle two matrices.
  Staging st{};
  for (int i = 0; i < l.m.n; ++i) {
    if (!can_map_rows(l.m.w[i], row_bytes, l.m.stride[i], slot, box_rows)) return false;
    if (i + 1 < l.m.n && l.m.rows[i] % kRows) return false;
  }
  const unsigned blocks = blocks_for(l.m.total, kRows);
  if (staged_mode(c.options()) == StagedMode::Big && int64_t(blocks) < int64_t(8) * c.sm_count) return false;
  const size_t stage = size_t(kRows) * slot;
  const int64_t nslices = (l.K / D::QK + SB - 1) / SB;
  const SmemLimits& lim = smem_limits();
  const size_t fixed = kernel_attributes<kernel>().sharedSizeBytes;
  const int64_t waves = (int64_t(blocks) + c.sm_count - 1) / c.sm_count;
  const int per_sm = int(std::max<int64_t>(1, std::min<int64_t>(resident_blocks<kernel>(512), waves)));
  // 128 bytes to align the stages; 16 past the last: a block's loader reads
  // a word past it.
  const int64_t budget =
      std::min<int64_t>(lim.per_block, lim.per_sm / per_sm - lim.reserved) - int64_t(fixed) - 128 - 16;
  // CudaOptions::stages: at most that many stages (for tuning).
  const int cap = c.options().stages > 0 ? std::min(c.options().stages, kMaxStages) : kMaxStages;
  const int stages = int(std::min<int64_t>({nslices, cap, budget / int64_t(stage)}));
  if (stages < 1) return false;
  for (int i = 0; i < l.m.n; ++i) map_rows(&st.map[i], l.m.w[i], row_bytes, l.m.rows[i], l.m.stride[i], slot, box_rows);
  st.stages = stages;
  st.slot = slot;
  st.bytes = uint32_t(stage);
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), lim.per_block - int(fixed));
  launch_kernel(kernel, blocks, 512, size_t(stages) * stage + 128 + 16, c.launch_stream(), l.m, l.K, l.xq, early, epi,
                st);
  return true;
}

// Whether the register-capped kernel may stand in for the plain one: it
// spills no more (CudaOptions::one_wave).
template <auto plain, auto capped>
bool may_cap(const OpCtx& c) {
  return c.options().one_wave &&
         kernel_attributes<capped>().localSizeBytes <= kernel_attributes<plain>().localSizeBytes;
}

// Whether `blocks` of `threads` take the register-capped kernel: where the
// plain one would need a second wave, the capped one runs them in one.
template <auto plain, auto capped>
bool capped_in_one_wave(int64_t blocks, int threads, const OpCtx& c) {
  const int64_t sms = c.sm_count;
  return may_cap<plain, capped>(c) && blocks > sms * resident_blocks<plain>(threads) &&
         blocks <= sms * resident_blocks<capped>(threads);
}

// The most blocks launch_with_warps_per_row's kernel for WARPS_PER_ROW warps
// a row runs in one wave (the register-capped kernel's, where it takes that
// one).
template <class D, int TOKENS, int WARPS_PER_ROW, class Epilogue>
int64_t one_wave_blocks(const OpCtx& c) {
  constexpr auto kernel = q8_mat_vec_kernel<D, TOKENS, WARPS_PER_ROW, kWarps, Epilogue>;
  const int64_t plain = int64_t(c.sm_count) * resident_blocks<kernel>(32 * kWarps);
  if constexpr (TOKENS == 1 && WARPS_PER_ROW == 1 && std::is_same_v<Epilogue, RowJobs>) {
    constexpr auto capped = q8_mat_vec_capped_kernel<D, TOKENS, WARPS_PER_ROW, kWarps, Epilogue>;
    if (may_cap<kernel, capped>(c)) return std::max(plain, int64_t(c.sm_count) * resident_blocks<capped>(32 * kWarps));
  }
  return plain;
}

// The kernel for TOKENS tokens with WARPS_PER_ROW warps a row and the
// launch's end (Epilogue).
template <class D, int TOKENS, int WARPS_PER_ROW, class Epilogue>
void launch_with_warps_per_row(const Launch& l, const OpCtx& c, bool early, const Epilogue& epi) {
  constexpr int R = rows_per_warp(TOKENS);
  // One token's q/k/v launch: one wave of blocks where capped registers
  // give it without spilling more (a second wave of a few blocks starts
  // only as the first ends; 8B q4_K: 768 blocks, 660 fit at 92 registers,
  // 792 at 80; H100 tg128 8B Q4_K_M +1.3%). WEIR_CUDA_ONE_WAVE=0: never
  // (for comparisons).
  if constexpr (TOKENS == 1 && WARPS_PER_ROW == 1 && std::is_same_v<Epilogue, RowJobs>) {
    constexpr auto plain = q8_mat_vec_kernel<D, TOKENS, WARPS_PER_ROW, kWarps, Epilogue>;
    constexpr auto capped = q8_mat_vec_capped_kernel<D, TOKENS, WARPS_PER_ROW, kWarps, Epilogue>;
    const int64_t blocks = blocks_for(l.m.total, kWarps / WARPS_PER_ROW * R);
    if (capped_in_one_wave<plain, capped>(blocks, 32 * kWarps, c))
      return launch_kernel(capped, unsigned(blocks), 32 * kWarps, 0, c.launch_stream(), l.m, l.K, l.xq, early, epi);
  }
  launch_kernel(q8_mat_vec_kernel<D, TOKENS, WARPS_PER_ROW, kWarps, Epilogue>,
                blocks_for(l.m.total, kWarps / WARPS_PER_ROW * R), 32 * kWarps, 0, c.launch_stream(), l.m, l.K, l.xq,
                early, epi);
}
template <class D, int TOKENS, class Epilogue>
void launch_with_epilogue(const Launch& l, const OpCtx& c, bool early, const Epilogue& epi) {
  // Jobs into an 8-bit cache (one token: can_run_row_jobs): 32 rows (a block
  // of a head) a launch block of 16 warps where those fill half the SMs or
  // more in one wave (1B: 96 blocks; H100 tg128 1B Q4_0 q/k/v 6.6 us, 7.0
  // with the f16 cache), else a cluster of 4 blocks of 4 warps (the one-token
  // launch's blocks, capped as launch_with_warps_per_row caps them; the 8B's
  // 192 blocks of 16 warps took two waves, 13.0 us against 8.9 with the f16
  // cache, 11.6 in clusters; its q6_K v alone, 32 blocks of 16 warps, 9.1 us
  // against 5.0).
  if constexpr (std::is_same_v<Epilogue, RowJobs> && TOKENS == 1) {
    bool q8 = false;
    for (int k = 0; k < l.m.n; ++k) q8 = q8 || epi.j[k].q8;
    if (q8) {
      constexpr auto wide = q8_mat_vec_kernel<D, TOKENS, 1, 16, Epilogue>;
      const int64_t sms = c.sm_count, wide_blocks = blocks_for(l.m.total, 32);
      if (2 * wide_blocks >= sms && wide_blocks <= sms * resident_blocks<wide>(512))
        return launch_kernel(wide, unsigned(wide_blocks), 512, 0, c.launch_stream(), l.m, l.K, l.xq, early, epi);
      constexpr auto plain = q8_mat_vec_kernel<D, TOKENS, 1, kWarps, Epilogue>;
      constexpr auto capped = q8_mat_vec_capped_kernel<D, TOKENS, 1, kWarps, Epilogue>;
      const int64_t blocks = blocks_for(l.m.total, 2 * kWarps);
      const bool cap = capped_in_one_wave<plain, capped>(blocks, 32 * kWarps, c);
      return launch_kernel_in_clusters(cap ? capped : plain, unsigned(blocks), 32 * kWarps, 0, c.launch_stream(),
                                       dim3(32 / (2 * kWarps), 1, 1), l.m, l.K, l.xq, early, epi);
    }
  }
  // Staged: the plain and scaled ends only (the others measured slower
  // staged, docs/perf.md; mat_vec takes them all, for trying again).
  if constexpr (std::is_same_v<Epilogue, Plain> || std::is_same_v<Epilogue, NormScaled>)
    if (staged_mode(c.options()) != StagedMode::Never && launch_staged<D, TOKENS>(l, c, early, epi)) return;
  constexpr int R = rows_per_warp(TOKENS);
  int wpr =
      warps_per_row((l.m.total + R - 1) / R, (l.K / D::QK) * D::CHUNKS, c.sm_count, c.options().decode_warps_per_sm);
  // Half the warps a row where the grid would take a second wave of blocks
  // and half the warps fit one (CudaOptions::one_wave): 1B Q4_0's q/k/v,
  // 768 blocks at two warps a row pair on 660 slots, 384 at one warp in one
  // wave (H100 tg128 +4-5%, at depth 4,096 too; the launch 7.0 -> 5.8 us).
  const auto one_wave = [&](int w) {
    return w == 1 ? one_wave_blocks<D, TOKENS, 1, Epilogue>(c)
           : w == 2 ? one_wave_blocks<D, TOKENS, 2, Epilogue>(c)
                    : one_wave_blocks<D, TOKENS, 4, Epilogue>(c);
  };
  const auto blocks = [&](int w) { return int64_t(blocks_for(l.m.total, kWarps / w * R)); };
  while (c.options().one_wave && wpr > 1 && blocks(wpr) > one_wave(wpr) && blocks(wpr / 2) <= one_wave(wpr / 2))
    wpr /= 2;
  if (wpr == 1) return launch_with_warps_per_row<D, TOKENS, 1>(l, c, early, epi);
  if (wpr == 2) return launch_with_warps_per_row<D, TOKENS, 2>(l, c, early, epi);
  launch_with_warps_per_row<D, TOKENS, 4>(l, c, early, epi);
}

// An add+norm launch split in K over clusters of 2 blocks
// (q8_add_norm_split_k_kernel), CudaOptions::add_norm_split_k: 0 never; 1 (the
// default) where the split grid runs in one wave (every cluster resident)
// and each block keeps a step of two chunks a lane (1B's down: 64 groups),
// else for the legacy types (one chunk a block: q4_0, q5_0, q8_0) where
// only two blocks an SM (one chunk a step) hold it in one wave (8B Q4_0's
// down and o: 128 groups on 132 SMs; not q4_K or q6_K, which lost there:
// docs/perf.md); 2 always, one block an SM; 3 always, two. Four chunks a
// step where each block has them and that spills no more (the deep
// kernel's rule, CudaOptions::add_norm_deep). Several tokens (up to 4): one
// block an SM, two chunks a step, only (3 is 2 there).
template <class D, int TOKENS>
bool launch_add_norm_split_k(const Launch& l, const OpCtx& c, bool early) {
  constexpr int KS = 2;
  constexpr auto one = q8_add_norm_split_k_kernel<D, TOKENS, KS, 2>;
  constexpr auto deep = q8_add_norm_split_k_kernel<D, 1, KS, 4>;
  constexpr auto two = q8_add_norm_split_k_kernel<D, 1, KS, 1, 2>;
  const int want = c.options().add_norm_split_k;
  if (want < 1) return false;
  const int64_t groups = l.m.total / 32, chunks = (l.K / D::QK) * D::CHUNKS;
  const dim3 grid(unsigned(groups * KS)), cluster(KS, 1, 1);
  const int fit = active_clusters<one>(512, 0, KS);  // clusters resident at once
  if (fit < 1) return false;                          // no clusters here
  bool pair = TOKENS == 1 && want == 3;
  if (want == 1 && !(chunks >= KS * 32 * 2 && groups <= fit)) {
    // (Not where one block an SM would hold the grid: the 1B's o, 64 chunks
    // a row, lost 5.7% split.)
    pair = TOKENS == 1 && D::CHUNKS == 1 && chunks >= KS * 32 && groups > fit &&
           groups <= active_clusters<two>(512, 0, KS) && kernel_attributes<two>().localSizeBytes == 0;
    if (!pair) return false;
  }
  if (pair) {
    launch_kernel_in_clusters(two, grid, 512, 0, c.launch_stream(), cluster, l.m, l.K, l.xq, early, l.add_norm);
  } else if (TOKENS == 1 && c.options().add_norm_deep && chunks >= KS * 32 * 4 &&
             kernel_attributes<deep>().localSizeBytes <= kernel_attributes<one>().localSizeBytes) {
    launch_kernel_in_clusters(deep, grid, 512, 0, c.launch_stream(), cluster, l.m, l.K, l.xq, early, l.add_norm);
  } else {
    launch_kernel_in_clusters(one, grid, 512, 0, c.launch_stream(), cluster, l.m, l.K, l.xq, early, l.add_norm);
  }
  return true;
}

template <class D, int TOKENS>
void launch_for_tokens(const Launch& l, const OpCtx& c) {
  constexpr int R = rows_per_warp(TOKENS);
  const bool early = c.weights_constant && c.options().early_weights;
  if constexpr (R == 2) {
    constexpr int kWarps32 = 16;  // blocks of 32 rows (or GLU outputs): one 8-bit block of the next x
    if (l.add_norm.ss) {  // one warp a row pair
      const bool deep = c.options().add_norm_deep;
      if (launch_add_norm_split_k<D, TOKENS>(l, c, early)) return;
      if constexpr (TOKENS == 1)
        if (deep && l.m.total / 32 <= c.sm_count / 2 && (l.K / D::QK) * D::CHUNKS >= 2 * 32 * 4 &&
            kernel_attributes<q8_add_norm_deep_kernel<D>>().localSizeBytes <=
                kernel_attributes<q8_mat_vec_kernel<D, TOKENS, 1, kWarps32, AddNormOut>>().localSizeBytes)
          return launch_kernel(q8_add_norm_deep_kernel<D>, unsigned(l.m.total / 32), 32 * kWarps32, 0,
                               c.launch_stream(), l.m, l.K, l.xq, early, l.add_norm);
      return launch_kernel(q8_mat_vec_kernel<D, TOKENS, 1, kWarps32, AddNormOut>, unsigned(l.m.total / 32),
                           32 * kWarps32, 0, c.launch_stream(), l.m, l.K, l.xq, early, l.add_norm);
    }
    if (l.glu.q8.q) {  // one warp two outputs
      GluOut glu = l.glu;
      glu.norm_in = l.norm_in;
      const unsigned blocks = unsigned(l.m.rows[0] / 32);
      if constexpr (TOKENS == 1 && glu_two_blocks<D>())
        return launch_kernel(q8_glu_kernel<D>, blocks, 32 * kWarps32, 0, c.launch_stream(), l.m, l.K, l.xq, early, glu);
      return launch_kernel(q8_mat_vec_kernel<D, TOKENS, 1, kWarps32, GluOut>, blocks, 32 * kWarps32, 0,
                           c.launch_stream(), l.m, l.K, l.xq, early, glu);
    }
    if (l.jobs.on) {
      RowJobs jobs = l.jobs;
      jobs.norm_in = l.norm_in;
      return launch_with_epilogue<D, TOKENS>(l, c, early, jobs);
    }
    if (l.norm_in.ss) return launch_with_epilogue<D, TOKENS>(l, c, early, NormScaled{l.norm_in});
  }
  if (l.add_norm.ss || l.jobs.on || l.norm_in.ss || l.glu.q8.q)
    throw Error("cuda mul_mat: deferred norms, row jobs and GLUs take at most " + std::to_string(kMaxTwoRowTokens) +
                " tokens");
  launch_with_epilogue<D, TOKENS>(l, c, early, Plain{});
}

template <class D>
void launch(const Tensor& dst, const Launch& l, const OpCtx& c) {
  switch (dst.n_rows()) {
    case 1: return launch_for_tokens<D, 1>(l, c);
    case 2: return launch_for_tokens<D, 2>(l, c);
    case 3: return launch_for_tokens<D, 3>(l, c);
    case 4: return launch_for_tokens<D, 4>(l, c);
    case 5: return launch_for_tokens<D, 5>(l, c);
    case 6: return launch_for_tokens<D, 6>(l, c);
    case 7: return launch_for_tokens<D, 7>(l, c);
    case 8: return launch_for_tokens<D, 8>(l, c);
    default: bad_operands("mul_mat", dst, "q8 decode kernels take at most 8 tokens");
  }
}

void launch_type(const Tensor& dst, const Launch& l, const OpCtx& c) {
  const DType w = dst.src[0]->dtype;
  if (!dispatch_q8_dot(w, [&]<class D>() { launch<D>(dst, l, c); }))
    bad_operands("mul_mat", dst, std::string("no q8 decode kernel for ") + dtype_name(w));
}

// The operands of the n products dsts[0..n), checked, with x quantized into
// scratch unless the plan has it there already (c.x_from: Q8InScratch; or
// in c.deferred_norm: DeferredNorm; or in c.glu_q8: GluQ8).
Launch prepare(const Tensor* const* dsts, int n, const OpCtx& c) {
  const Tensor& dst = *dsts[0];
  const Tensor& W = *dst.src[0];
  const int64_t K = W.ne[0], T = dst.n_rows();
  if (q8_act_bytes(K, T) > c.scratch_bytes) bad_operands("mul_mat", dst, "scratch too small");
  Launch l{};
  l.K = K;
  // The weight rows must keep the blocks' natural alignment (16 bytes for
  // q4_K / q5_K, 8 for iq4_xs, none for mxfp4, 2 for the others, read as
  // aligned words: q8_row_alignment).
  l.m = group_mats(dsts, n, q8_row_alignment(W.dtype));
  if (c.x_from == ActivationSource::DeferredNorm) {
    if (!c.deferred_norm || deferred_norm_q8_bytes(K, T) > c.deferred_norm_capacity || K % 32)
      bad_operands("mul_mat", dst, "no deferred norm to read x from");
    const Q8Act act = Q8Act::in(c.deferred_norm, K, T);
    l.xq = QuantizedX{act.q, act.ds, K};
    l.norm_in = DeferredNormIn{norm_sums(c.deferred_norm, K, T), int(K / 32), float(K), c.deferred_norm_eps};
    return l;
  }
  if (c.x_from == ActivationSource::GluQ8) {
    if (!c.glu_q8 || q8_act_bytes(K, T) > c.glu_q8_capacity)
      bad_operands("mul_mat", dst, "no GLU 8-bit blocks to read x from");
    const Q8Act act = Q8Act::in(c.glu_q8, K, T);
    l.xq = QuantizedX{act.q, act.ds, K};
    return l;
  }
  const Q8Act act = Q8Act::in(c.scratch, K, T);
  if (c.x_from != ActivationSource::Q8InScratch) {
    const int64_t n_xb = (K / 32) * T;
    launch_kernel(quantize_x_kernel, blocks_for(n_xb, 8), 256, 0, c.launch_stream(), rows_of(*dst.src[1]), K, T, act);
  }
  l.xq = QuantizedX{act.q, act.ds, K};
  return l;
}

}  // namespace

void q8_mat_vec(const Tensor* const* dsts, int n, const OpCtx& c) {
  Launch l = prepare(dsts, n, c);
  if (c.row_jobs) {
    if (!can_run_row_jobs(dsts, n, c.row_jobs))
      bad_operands("mul_mat", *dsts[0], "cannot run these rope/set_rows jobs");
    l.jobs.on = true;
    for (int k = 0; k < n; ++k) l.jobs.j[k] = make_rope_job(c.row_jobs[k]);
  }
  launch_type(*dsts[0], l, c);
}

void q8_mat_vec_add_norm(const Tensor& product, const Tensor& add, const Tensor& norm, const Tensor& mul,
                          const OpCtx& c) {
  if (!q8_can_defer_norm(product, add, norm, mul)) bad_operands("mul_mat", product, "cannot defer " + norm.name);
  if (c.x_from == ActivationSource::DeferredNorm)
    bad_operands("mul_mat", product, "reads the deferred norm it would write");
  const Tensor* one[1] = {&product};
  Launch l = prepare(one, 1, c);
  const int64_t K = product.ne[0], T = product.n_rows();
  if (!c.deferred_norm || deferred_norm_q8_bytes(K, T) > c.deferred_norm_capacity)
    bad_operands("mul_mat", product, "no memory for a deferred norm");
  const Tensor& r = add.src[0] == &product ? *add.src[1] : *add.src[0];
  l.add_norm = AddNormOut{rows_of(r), rows_of(add), static_cast<const float*>(mul.src[1]->data),
                          Q8Act::in(c.deferred_norm, K, T), norm_sums(c.deferred_norm, K, T)};
  launch_type(product, l, c);
}

void q8_mat_vec_glu(const Tensor& a, const Tensor& b, const Tensor& glu, const OpCtx& c) {
  if (!can_fuse_glu(a, b, glu)) bad_operands("mul_mat", a, "cannot apply " + glu.name + " in its launch");
  const Tensor* mats[2] = {glu.src[0], glu.src[1]};  // gate first
  Launch l = prepare(mats, 2, c);
  const int64_t N = glu.ne[0], T = glu.n_rows();
  if (!c.glu_q8 || glu_q8_bytes(glu) > c.glu_q8_capacity) bad_operands("mul_mat", a, "no memory for " + glu.name);
  if (c.x_from == ActivationSource::GluQ8) bad_operands("mul_mat", a, "reads the GLU's 8-bit blocks it would write");
  l.glu = GluOut{Q8Act::in(c.glu_q8, N, T), glu.op == Op::GeluMul, {}};
  launch_type(*mats[0], l, c);
}

void q8_quantize_rows(const Tensor& x, const OpCtx& c) {
  const int64_t K = x.ne[0], T = x.n_rows();
  if (x.dtype != DType::F32 || x.nb[0] != 4 || K % 32) bad_operands("quantize", x, "rows must be F32, K % 32 == 0");
  if (q8_act_bytes(K, T) > c.scratch_bytes) bad_operands("quantize", x, "scratch too small");
  const int64_t n_xb = (K / 32) * T;
  launch_kernel(quantize_x_kernel, blocks_for(n_xb, 8), 256, 0, c.launch_stream(), rows_of(x), K, T,
                Q8Act::in(c.scratch, K, T));
}

}  // namespace weir::cuda
