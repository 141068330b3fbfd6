// The experts' products on 8-bit activations (moe_ops.h): x quantized per
// 32 elements as for the dense decode products, the weights' quants dotted
// with it by dp4a through the same per-type chunk readers (q8_dot.cuh).
//
// Which rows a block reads comes from ids on the device, so a CUDA graph
// replays any routing. Two ways to pair tokens with experts:
// - a block a (slot, token) pair (up to kExpertDirectPairs pairs: decode), only
//   the chosen experts' rows read, once a pair;
// - more pairs (prefill): a sort kernel lists the pairs by expert and cuts
//   each expert's list into tiles of up to 4 (GLU) or 8 pairs; a block takes
//   a tile and reads its expert's rows once for all its tokens.
// A pair's sums run in the same order whatever its tile, so results do not
// depend on how the sort ordered a list.
//
// Launches: gate and up with the GLU (a block 32 outputs of a pair or a
// tile, written only as 8-bit blocks for the down product); a product alone
// (F32 results a pair); for decode, down with moe_sum (a block R rows of a
// token, every one of its experts; the weighted sum in slot order).
#include <cuda_fp16.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/glu.cuh"
#include "backend/cuda/moe_ops.h"
#include "backend/cuda/mul_mat_q8.h"
#include "backend/cuda/mul_mat_tile.h"
#include "backend/cuda/plan/kernel_limits.h"
#include "backend/cuda/plan/moe_rules.h"
#include "backend/cuda/q8_act.cuh"
#include "backend/cuda/q8_dot.cuh"

namespace weir::cuda {
namespace {

// (kExpertDirectPairs: up to this many pairs, a block a pair; kExpertGluTile,
// kExpertProductTile: the pairs of a tile (more pairs), the GLU's (4 rows a
// warp) and a product's (2 rows a warp): plan/kernel_limits.h.)
constexpr int kWarps = 16;             // warps of a product block: 32 rows (GLU: 32 outputs)

// The experts' weights: W [K, N, E] of row stride `row` and expert stride `expert`.
struct ExpertW {
  const uint8_t* w;
  size_t row, expert;
  __device__ __forceinline__ const uint8_t* at(int e, int64_t j) const {  // row j of expert e
    return w + size_t(e) * expert + size_t(j) * row;
  }
};
// Where a pair's x and ids are: pair p = j + k t (slot j of token t).
struct Route {
  const int32_t* ids;
  int k;
  int64_t E;
  int x_per_token;  // 1: the token's x for every slot; k: slot j its own row
  __device__ __forceinline__ int64_t x_row(int64_t p) const { return x_per_token == 1 ? p / k : p; }
};
// A tile: expert e (-1: pairs whose id is out of range), pairs
// order[start .. start + n).
struct Tiles {
  const int32_t* order;  // null: a block a pair (blockIdx.y)
  const int4* tile;      // (e, start, n, 0)
  const int* count;
};

// The pairs of the block's tile: their indices, n valid (the slots past n
// repeat the last pair: computed, never stored), and their x rows (x, from
// the 8-bit x of every row xb). False: no such tile (the grid is sized for
// the most there can be).
template <int TOKENS>
__device__ __forceinline__ bool tile_pairs(const Tiles& tl, const Route& rt, const QuantizedX& xb, int* e, int* n,
                                           int64_t (&pair)[TOKENS], QuantizedXRows<TOKENS>* x) {
  if (!tl.order) {
    pair[0] = blockIdx.y;
    *e = rt.ids[blockIdx.y];
    *n = 1;
  } else {
    if (int(blockIdx.y) >= *tl.count) return false;
    const int4 t = tl.tile[blockIdx.y];
    *e = t.x, *n = t.z;
#pragma unroll
    for (int s = 0; s < TOKENS; ++s) pair[s] = tl.order[t.y + min(s, t.z - 1)];
  }
  if (*e < 0 || *e >= rt.E) *e = -1;
  *x = QuantizedXRows<TOKENS>{xb.q, xb.ds, xb.K, {}};
#pragma unroll
  for (int s = 0; s < TOKENS; ++s) x->row[s] = rt.x_row(pair[s]);
  return true;
}

// R rows of a warp over a row's chunks, U a step (all loaded, then
// dotted), into acc (zeroed first; left zero where !live).
template <class D, int TOKENS, int R, int U, class X>
__device__ __forceinline__ void rows_dot(const uint8_t* const (&w)[R], int64_t K, const X& x, Acc<R, TOKENS>& acc,
                                         int lane, bool live) {
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int s = 0; s < TOKENS; ++s) acc[r][s] = 0.0f;
  if (!live) return;
  const int64_t chunks = K / D::QK * D::CHUNKS;
  typename D::Raw raw[U][R];
  for (int64_t i0 = lane; i0 < chunks; i0 += 32 * U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = min(i0 + 32 * u, chunks - 1), blk = i / D::CHUNKS;
#pragma unroll
      for (int r = 0; r < R; ++r) D::load(w[r] + blk * D::BYTES, int(i % D::CHUNKS), raw[u][r]);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = i0 + 32 * u;
      if (i < chunks) D::template dot<TOKENS, R>(raw[u], int(i % D::CHUNKS), x, i / D::CHUNKS * D::QK, acc);
    }
  }
}

__device__ __forceinline__ float nan_f() { return __int_as_float(0x7fc00000); }

// gate and up of a pair or tile with the GLU: warp w takes gate rows j, j + 1
// and up rows j, j + 1 (j = 32 blockIdx.x + 2 w); warp s < n stores pair s's
// 32 outputs as one 8-bit block of h (rows: pairs).
template <class D, int TOKENS, int U>
__device__ __forceinline__ void glu_body(ExpertW gate, ExpertW up, int64_t K, QuantizedX xb, Route rt, Tiles tl,
                                         Q8Act h, bool gelu) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  pdl_wait();
  int e, n;
  int64_t pair[TOKENS];
  QuantizedXRows<TOKENS> x;
  if (!tile_pairs<TOKENS>(tl, rt, xb, &e, &n, pair, &x)) return;
  const int64_t j = int64_t(blockIdx.x) * 32 + 2 * warp;
  const int eo = max(e, 0);
  const uint8_t* const w[4] = {gate.at(eo, j), gate.at(eo, j + 1), up.at(eo, j), up.at(eo, j + 1)};
  float acc[4][TOKENS];
  rows_dot<D, TOKENS, 4, U>(w, K, x, acc, lane, e >= 0);
  __shared__ float sh[TOKENS][32];
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int s = 0; s < TOKENS; ++s) acc[r][s] = warp_sum(acc[r][s]);
  if (lane < 2) {
#pragma unroll
    for (int s = 0; s < TOKENS; ++s) {
      const float g = lane ? acc[1][s] : acc[0][s], u = lane ? acc[3][s] : acc[2][s];
      sh[s][2 * warp + lane] = e < 0 ? nan_f() : gelu ? GeluMulF{}(g, u) : SiluMulF{}(g, u);
    }
  }
  __syncthreads();
  if (warp < n && warp < TOKENS) q8_store_block(h, pair[warp], blockIdx.x, sh[warp][lane]);
}
// A block a pair: 64 registers, so that two blocks of 16 warps share a SM
// (qwen3-30b-a3b: 24 blocks a pair, 192 a token, all resident at once).
template <class D>
__global__ void __launch_bounds__(32 * kWarps, 2)
    expert_glu_pair_kernel(ExpertW gate, ExpertW up, int64_t K, QuantizedX x, Route rt, Tiles tl, Q8Act h, bool gelu) {
  glu_body<D, 1, 1>(gate, up, K, x, rt, tl, h, gelu);
}
template <class D>
__global__ void __launch_bounds__(32 * kWarps)
    expert_glu_tile_kernel(ExpertW gate, ExpertW up, int64_t K, QuantizedX x, Route rt, Tiles tl, Q8Act h, bool gelu) {
  glu_body<D, kExpertGluTile, 1>(gate, up, K, x, rt, tl, h, gelu);
}

// One product: warp w takes rows 32 blockIdx.x + 2 w, + 1 of the pair's or
// tile's expert; y [N, pairs] F32.
template <class D, int TOKENS, int U>
__device__ __forceinline__ void product_body(ExpertW W, int64_t K, int64_t N, QuantizedX xb, Route rt, Tiles tl,
                                             float* y) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  pdl_wait();
  int e, n;
  int64_t pair[TOKENS];
  QuantizedXRows<TOKENS> x;
  if (!tile_pairs<TOKENS>(tl, rt, xb, &e, &n, pair, &x)) return;
  const int64_t j = int64_t(blockIdx.x) * 32 + 2 * warp;
  const int eo = max(e, 0);
  const uint8_t* const w[2] = {W.at(eo, j), W.at(eo, j + 1)};
  float acc[2][TOKENS];
  rows_dot<D, TOKENS, 2, U>(w, K, x, acc, lane, e >= 0);
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int s = 0; s < TOKENS; ++s) acc[r][s] = warp_sum(acc[r][s]);
  if (lane == 0)
#pragma unroll
    for (int s = 0; s < TOKENS; ++s)
      if (s < n)
#pragma unroll
        for (int r = 0; r < 2; ++r) y[pair[s] * N + j + r] = e < 0 ? nan_f() : acc[r][s];
}
template <class D>
__global__ void __launch_bounds__(32 * kWarps)
    expert_product_pair_kernel(ExpertW W, int64_t K, int64_t N, QuantizedX x, Route rt, Tiles tl, float* y) {
  product_body<D, 1, 2>(W, K, N, x, rt, tl, y);
}
template <class D>
__global__ void __launch_bounds__(32 * kWarps)
    expert_product_tile_kernel(ExpertW W, int64_t K, int64_t N, QuantizedX x, Route rt, Tiles tl, float* y) {
  product_body<D, kExpertProductTile, 1>(W, K, N, x, rt, tl, y);
}

// down with moe_sum, token blockIdx.y: the block's threads take (slot,
// chunk) items of its R rows, each item's sums weighted by the slot's
// weight; the block's partial sums are added warp by warp in a fixed order.
constexpr int kSumRows = 2;
constexpr int kSumWarps = 8;
// (kExpertMaxSlots, experts a token: plan/kernel_limits.h.)
template <class D>
__global__ void __launch_bounds__(32 * kSumWarps)
    expert_down_sum_kernel(ExpertW W, int64_t K, int64_t N, QuantizedX xb, Route rt, const float* wts, float* out) {
  constexpr int R = kSumRows, U = 2;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t t = blockIdx.y, n0 = int64_t(blockIdx.x) * R;
  const int chunks = int(K / D::QK * D::CHUNKS), items = chunks * rt.k, stride = int(blockDim.x);
  // The token's slots: each one's rows, weight and x row, once a block.
  __shared__ const uint8_t* rows[kExpertMaxSlots];
  __shared__ float wt[kExpertMaxSlots];
  __shared__ int64_t xrow[kExpertMaxSlots];
  __shared__ int any_bad;
  pdl_wait();
  if (threadIdx.x == 0) any_bad = 0;
  __syncthreads();
  if (int(threadIdx.x) < rt.k) {
    const int64_t p = t * rt.k + threadIdx.x;
    const int32_t e = rt.ids[p];
    if (e < 0 || e >= rt.E) any_bad = 1;
    rows[threadIdx.x] = W.w + size_t(e >= 0 && e < rt.E ? e : 0) * W.expert + size_t(n0) * W.row;
    wt[threadIdx.x] = wts[p];
    xrow[threadIdx.x] = rt.x_row(p);
  }
  __syncthreads();
  float acc[R] = {};
  typename D::Raw raw[U][R];
  // Item i = (slot j, chunk c), i = j chunks + c; a thread's items advance
  // by the block's stride without dividing.
  const int sj = stride / chunks, sc = stride % chunks;
  int j = int(threadIdx.x) / chunks, c = int(threadIdx.x) % chunks;
  for (int i0 = threadIdx.x; i0 < items; i0 += stride * U) {
    int js[U], cs[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      js[u] = j, cs[u] = c;
      j += sj, c += sc;
      if (c >= chunks) c -= chunks, ++j;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const bool in = i0 + stride * u < items;  // past the end: the step's first item again, not used
      const int ju = in ? js[u] : js[0], cu = in ? cs[u] : cs[0];
#pragma unroll
      for (int r = 0; r < R; ++r)
        D::load(rows[ju] + size_t(r) * W.row + (cu / D::CHUNKS) * D::BYTES, cu % D::CHUNKS, raw[u][r]);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (i0 + stride * u >= items) continue;
      QuantizedXRows<1> x{xb.q, xb.ds, K, {xrow[js[u]]}};
      float part[R][1] = {};
      D::template dot<1, R>(raw[u], cs[u] % D::CHUNKS, x, int64_t(cs[u] / D::CHUNKS) * D::QK, part);
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r] += wt[js[u]] * part[r][0];
    }
  }
  __shared__ float sums[kSumWarps][R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float v = warp_sum(acc[r]);
    if (lane == 0) sums[warp][r] = v;
  }
  __syncthreads();
  if (threadIdx.x < R) {
    float s = 0.0f;
    for (int w = 0; w < stride / 32; ++w) s += sums[w][threadIdx.x];
    out[t * N + n0 + threadIdx.x] = any_bad ? nan_f() : s;
  }
}

// The pairs listed by expert (ids out of range: bucket E, tiles of e = -1)
// and cut into tiles of up to `tile` pairs; one block. The order within an
// expert's list is the atomics' (results do not depend on it).
__global__ void expert_sort_kernel(const int32_t* ids, int64_t P, int64_t E, int tile, int32_t* order, int4* tiles,
                                   int* count) {
  extern __shared__ int sort_mem[];
  int* cnt = sort_mem;             // E + 1
  int* cursor = sort_mem + E + 1;  // E + 1
  pdl_wait();
  for (int64_t b = threadIdx.x; b <= E; b += blockDim.x) cnt[b] = 0;
  __syncthreads();
  for (int64_t p = threadIdx.x; p < P; p += blockDim.x) {
    const int32_t e = ids[p];
    atomicAdd(&cnt[e >= 0 && e < E ? e : E], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int start = 0, nt = 0;
    for (int64_t b = 0; b <= E; ++b) {
      cursor[b] = start;
      for (int s = 0; s < cnt[b]; s += tile)
        tiles[nt++] = make_int4(b == E ? -1 : int(b), start + s, min(tile, cnt[b] - s), 0);
      start += cnt[b];
    }
    *count = nt;
  }
  __syncthreads();
  for (int64_t p = threadIdx.x; p < P; p += blockDim.x) {
    const int32_t e = ids[p];
    order[atomicAdd(&cursor[e >= 0 && e < E ? e : E], 1)] = int32_t(p);
  }
}

// A launch's operands: the 8-bit x (quantized into scratch here, or written
// by the launch before: a norm's blocks in scratch, or the GLU's 8-bit
// blocks), the route and, for many pairs, the sorted tiles (in scratch
// after x).
struct Setup {
  QuantizedX x;
  Route rt;
  Tiles tl{};
  unsigned grid_y;
};

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

// The sort's lists in scratch after x (the layout expert_scratch_bytes,
// plan/moe_rules.h, sizes: x's 8-bit blocks or fp16 rows, then the sort's
// order, tiles and count; expert_max_tiles tiles at most).
struct Lists {
  int32_t* order;
  int4* tiles;
  int* count;
};
Lists lists(const OpCtx& c, int64_t K, int64_t x_rows, int64_t P, int64_t E) {
  char* base = static_cast<char*>(c.scratch) + expert_x_bytes(K, x_rows);
  return {reinterpret_cast<int32_t*>(base), reinterpret_cast<int4*>(base + align256(size_t(P) * 4)),
          reinterpret_cast<int*>(base + align256(size_t(P) * 4) + align256(size_t(expert_max_tiles(P, E)) * 16))};
}
void sort_pairs(const Route& rt, int64_t P, int tile, const Lists& l, const OpCtx& c) {
  launch_kernel(expert_sort_kernel, 1, 1024, size_t(2 * (rt.E + 1)) * sizeof(int), c.launch_stream(), rt.ids, P, rt.E,
                tile, l.order, l.tiles, l.count);
  WEIR_CUDA_CHECK_LAUNCH();
}

Setup setup(const Tensor& W, const Tensor& X, const Tensor& ids, int tile, const OpCtx& c) {
  const int64_t K = W.ne[0], E = W.ne[2], k = ids.ne[0], T = ids.ne[1], P = k * T, x_rows = X.n_rows();
  if (expert_scratch_bytes(K, x_rows, P, E) > c.scratch_bytes) throw Error("cuda mul_mat_id: scratch too small");
  Setup s;
  s.rt = Route{static_cast<const int32_t*>(ids.data), int(k), E, int(x_rows / T)};
  if (c.x_from == ActivationSource::GluQ8) {
    if (!c.glu_q8 || q8_act_bytes(K, x_rows) > c.glu_q8_capacity)
      throw Error("cuda mul_mat_id: no GLU 8-bit blocks to read x from");
    const Q8Act a = Q8Act::in(c.glu_q8, K, x_rows);
    s.x = QuantizedX{a.q, a.ds, K};
  } else {
    if (c.x_from != ActivationSource::Q8InScratch)
      q8_quantize_rows(X, c);  // into the start of scratch (else the norm before wrote it there)
    const Q8Act a = Q8Act::in(c.scratch, K, x_rows);
    s.x = QuantizedX{a.q, a.ds, K};
  }
  s.grid_y = unsigned(P);
  if (P > kExpertDirectPairs) {
    const Lists l = lists(c, K, x_rows, P, E);
    sort_pairs(s.rt, P, tile, l, c);
    s.tl = Tiles{l.order, l.tiles, l.count};
    s.grid_y = unsigned(expert_max_tiles(P, E, tile));
  }
  return s;
}

ExpertW expert_w(const Tensor& W) { return {static_cast<const uint8_t*>(W.data), W.nb[1], W.nb[2]}; }

}  // namespace

// The MMA tiles: x to fp16 (every row), the pairs sorted into tiles of 64.
void expert_mul_mat_mma(const Tensor& dst, const OpCtx& c) {
  const Tensor& W = *dst.src[0];
  const Tensor& X = *dst.src[1];
  const Tensor& ids = *dst.src[2];
  const int64_t K = W.ne[0], N = W.ne[1], E = W.ne[2], k = ids.ne[0], T = ids.ne[1], P = k * T, x_rows = X.n_rows();
  if (expert_scratch_bytes(K, x_rows, P, E) > c.scratch_bytes) bad_operands("mul_mat_id", dst, "scratch too small");
  mma_convert_x(X, K, x_rows, c);
  const Route rt{static_cast<const int32_t*>(ids.data), int(k), E, int(x_rows / T)};
  constexpr int kMmaTile = 64;  // the MMA tile kernel's tokens
  const Lists l = lists(c, K, x_rows, P, E);
  sort_pairs(rt, P, kMmaTile, l, c);
  const MmaExperts a{static_cast<const uint8_t*>(W.data), W.nb[1], W.nb[2], K, N,
                     static_cast<const __half*>(c.scratch), rt.k, rt.x_per_token, l.order, l.tiles, l.count,
                     static_cast<float*>(dst.data)};
  mma_expert_mul_mat(a, W.dtype, unsigned(expert_max_tiles(P, E, kMmaTile)), c);
}

void expert_mul_mat(const Tensor& dst, const OpCtx& c) {
  if (!has_expert_q8(dst)) bad_operands("mul_mat_id", dst, "no 8-bit expert kernel for these operands");
  if (c.x_from == ActivationSource::Rows && expert_mma(dst, c.options())) return expert_mul_mat_mma(dst, c);
  const Tensor& W = *dst.src[0];
  const int64_t K = W.ne[0], N = W.ne[1];
  if (dst.src[2]->n_elements() == 0) return;
  const Setup s = setup(W, *dst.src[1], *dst.src[2], kExpertProductTile, c);
  const dim3 grid(unsigned(N / 32), s.grid_y);
  dispatch_q8_dot(W.dtype, [&]<class D>() {
    const auto kernel = s.tl.order ? expert_product_tile_kernel<D> : expert_product_pair_kernel<D>;
    launch_kernel(kernel, grid, 32 * kWarps, 0, c.launch_stream(), expert_w(W), K, N, s.x, s.rt, s.tl,
                  static_cast<float*>(dst.data));
  });
  WEIR_CUDA_CHECK_LAUNCH();
}

void op_expert_glu(const Tensor& a, const Tensor& b, const Tensor& glu, const OpCtx& c) {
  if (!can_fuse_expert_glu(a, b, glu)) bad_operands("mul_mat_id", a, "cannot apply " + glu.name + " in its launch");
  if (c.x_from == ActivationSource::GluQ8) bad_operands("mul_mat_id", a, "reads the GLU's 8-bit blocks it would write");
  if (!c.glu_q8 || expert_glu_q8_bytes(glu) > c.glu_q8_capacity)
    bad_operands("mul_mat_id", a, "no memory for " + glu.name);
  const Tensor& gate = *glu.src[0];
  const Tensor& up = *glu.src[1];
  const Tensor& W = *gate.src[0];
  const int64_t K = W.ne[0], N = W.ne[1];
  if (gate.src[2]->n_elements() == 0) return;
  const Setup s = setup(W, *gate.src[1], *gate.src[2], kExpertGluTile, c);
  const Q8Act h = Q8Act::in(c.glu_q8, N, glu.n_rows());
  const dim3 grid(unsigned(N / 32), s.grid_y);
  dispatch_q8_dot(W.dtype, [&]<class D>() {
    const auto kernel = s.tl.order ? expert_glu_tile_kernel<D> : expert_glu_pair_kernel<D>;
    launch_kernel(kernel, grid, 32 * kWarps, 0, c.launch_stream(), expert_w(W), expert_w(*up.src[0]), K, s.x, s.rt,
                  s.tl, h, glu.op == Op::GeluMul);
  });
  WEIR_CUDA_CHECK_LAUNCH();
}

void op_expert_down_sum(const Tensor& down, const Tensor& sum, const OpCtx& c) {
  if (!can_fuse_expert_down_sum(down, sum))
    bad_operands("mul_mat_id", down, "cannot sum " + sum.name + " in its launch");
  const Tensor& W = *down.src[0];
  const int64_t K = W.ne[0], N = W.ne[1], k = down.src[2]->ne[0], T = down.src[2]->ne[1];
  if (T == 0) return;
  const Setup s = setup(W, *down.src[1], *down.src[2], 1, c);
  const dim3 grid(unsigned(N / kSumRows), unsigned(T));
  dispatch_q8_dot(W.dtype, [&]<class D>() {
    // Threads: enough that each has two items (U) where the items are few.
    const int64_t items = K / D::QK * D::CHUNKS * k;
    const int threads = int(std::clamp<int64_t>((items / 2 + 31) / 32 * 32, 32, 32 * kSumWarps));
    launch_kernel(expert_down_sum_kernel<D>, grid, threads, 0, c.launch_stream(), expert_w(W), K, N, s.x, s.rt,
                  static_cast<const float*>(sum.src[1]->data), static_cast<float*>(sum.data));
  });
  WEIR_CUDA_CHECK_LAUNCH();
}

}  // namespace weir::cuda
