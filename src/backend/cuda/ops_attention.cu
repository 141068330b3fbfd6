// attention (core/graph.h) on the GPU: q F32 [D, Hq, T], k and v F16, F32
// or Q8_0 (the 8-bit cache, -ctk q8_0: heads of whole 34-byte blocks)
// [D, Hkv, S] (KV cache views), mask F32 [S, T] of 0 / -inf, scale; output
// F32 [D*Hq, T]. Same semantics as the CPU reference (backend/cpu/
// ops_attention.cpp): s_j = q.k_j * scale + mask_j, softmax over the keys
// that are not masked, out = sum_j p_j v_j; a row with every key masked is 0.
//
// Rows. For kv head g, the query rows (t, h) with h in g's group (G = Hq/Hkv
// heads) are numbered r = t * G + (h - g * G); a block takes consecutive rows,
// so the heads that share a kv head, and consecutive tokens, read each K/V row
// once. Scores are kept in log2 units (q is scaled by scale * log2(e)).
//
// Three kernels (attention_vec.cuh, attention_dec.cuh, attention_mma.cuh;
// their shared pieces in attention_common.cuh), all splitting the keys across
// blocks (flash-decoding) when the (row block, kv head) pairs alone do not
// fill the GPU; each split leaves an unnormalized output with its running
// (max, sum), and attn_combine merges them. With one split the kernel writes
// the normalized output itself.
//
// - attn_vec (CUDA cores; decode, F32 caches (8-bit ones where attn_dec and
//   attn_mma do not take them), any D that is a multiple of 8,
//   and batched decode, where each token is of another sequence: graph.h's
//   separate_tokens hint): R <= 8 rows per block, 128 threads; with the
//   hint, a block's rows are of one token, so it reads only that token's
//   span of keys (the KV cache keeps a sequence's cells together), found
//   by the attn_ranges pre-pass rather than each block scanning the mask. A
//   key row is read by L lanes (8 elements = one 16-byte F16 load each); every thread holds its 8 dims of q
//   for the R rows, so a key group computes R partial dots, reduced across
//   its L lanes by a transposing butterfly (R - 1 + log2(L/R) shuffles for R
//   sums). The same threads then accumulate p * v for their 8 dims of R rows;
//   the key groups' accumulators are summed in shared memory at the end. The
//   block first scans its tokens' mask over its key range and visits only
//   [first, last] unmasked key; K and V of a tile are loaded together.
//   Decode splits are strided: split s takes key tiles s, s + n, s + 2n, ...
//   (skipping those with no key to see), so a sliding window deep in the
//   cache is spread over many splits. Short spans take one split of a
//   block a query head (256 threads; 512 for 256-dim heads) and no merge.
// - attn_dec (tensor cores; decode over long spans, F16 or 8-bit caches, D
//   in {64, 128, 256}, blocks of 8 rows; 8-bit tiles turned into halves in
//   shared memory, each warp its own keys): each warp takes 16 keys of a tile, S = Q K^T
//   and O^T += V^T P^T by mma, tiles staged by cp.async, the warps merged
//   at the end; strided splits as attn_vec's (the kernel's comment). Where
//   it has 16 splits or fewer of at most 2 tiles each, they are one
//   thread-block cluster and merge inside it through distributed shared
//   memory (no attn_combine).
// - attn_mma (tensor cores; F16 caches, and 8-bit ones copied into halves
//   first (q8_to_half), D in {64, 128, 256}, more than 8 rows
//   per kv head): FlashAttention-2 style. 64 rows per block (4 warps x 16
//   rows), key tiles of 64 (32 for D = 256) double-buffered in shared memory
//   by cp.async, S = Q K^T and O += P V by mma.sync m16n8k16 (f16 in, f32
//   accumulate). A pre-pass (attn_ranges) finds each token's first and last
//   unmasked key; a block visits only the key tiles between its tokens'
//   extremes (causal and sliding-window masks skip the rest), split evenly
//   across its splits.
//
// Masked scores are set to -inf by a select (never computed as dot + -inf),
// so finite garbage in masked K/V cells cannot produce NaN.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <utility>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/attention_dec.cuh"
#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/attention_vec.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/mul_mat_q8.h"
#include "backend/cuda/q8_act.cuh"
#include "core/error.h"

namespace weir::cuda {
namespace {

using namespace attention;

// attn_ranges: grid (T, ceil(S / kRangeChunk)), 256 threads. For token t and
// chunk c: (first, last + 1) unmasked key of the chunk, (S, 0) when none.
__global__ void __launch_bounds__(256) attn_ranges(const float* mask, int64_t m_nb1, int S, bool m16, int2* out) {
  pdl_wait();
  __shared__ int red[2][8];
  const int t = blockIdx.x, chunk = blockIdx.y, tid = threadIdx.x;
  const int kb = chunk * kRangeChunk, ke = min(S, kb + kRangeChunk);
  const float* mr = mask + t * m_nb1;
  int lo = INT_MAX, hi = -1;
  if (m16) {
#pragma unroll
    for (int i = 0; i < kRangeChunk / (4 * 256); ++i) {
      const int j = kb + 4 * (tid + 256 * i);
      if (j + 4 <= ke) {
        const float4 x = __ldg(reinterpret_cast<const float4*>(mr + j));
        if (x.x != -INFINITY) lo = min(lo, j), hi = max(hi, j);
        if (x.y != -INFINITY) lo = min(lo, j + 1), hi = max(hi, j + 1);
        if (x.z != -INFINITY) lo = min(lo, j + 2), hi = max(hi, j + 2);
        if (x.w != -INFINITY) lo = min(lo, j + 3), hi = max(hi, j + 3);
      } else {
        for (int jj = j; jj < ke; ++jj)
          if (__ldg(mr + jj) != -INFINITY) lo = min(lo, jj), hi = max(hi, jj);
      }
    }
  } else {
#pragma unroll 4
    for (int j = kb + tid; j < ke; j += 256)
      if (__ldg(mr + j) != -INFINITY) lo = min(lo, j), hi = max(hi, j);
  }
  lo = __reduce_min_sync(0xffffffffu, lo);
  hi = __reduce_max_sync(0xffffffffu, hi);
  if ((tid & 31) == 0) red[0][tid >> 5] = lo, red[1][tid >> 5] = hi;
  __syncthreads();
  if (tid == 0) {
    for (int w = 1; w < 8; ++w) lo = min(lo, red[0][w]), hi = max(hi, red[1][w]);
    out[int64_t(t) * gridDim.y + chunk] = hi < 0 ? make_int2(S, 0) : make_int2(lo, hi + 1);
  }
}

// attn_combine: grid (T * Hq, ceil(D / 32)), 128 threads. Block (row, d0)
// merges the splits' partials of dims d0 .. d0+31 of output row (t, h): the
// warps take every 4th split, a lane a dim.
__global__ void __launch_bounds__(kThreads) attn_combine(const Params p) {
  pdl_wait();
  constexpr int NW = kThreads / 32;
  __shared__ float wsh[kMaxSplits];
  __shared__ float red_m[NW], red_l[NW], red_a[NW][32];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t TH = int64_t(p.T) * p.Hq, row = blockIdx.x;
  const int t = int(row / p.Hq), h = int(row % p.Hq), D = p.D, ns = p.splits;
  const int d = blockIdx.y * 32 + lane;
  float* out = p.out + t * p.o_nb1 + int64_t(h) * D;
  // The largest of the splits' maxima, then weights 2^(m_s - M) and the total sum.
  float M = -INFINITY;
  for (int s = tid; s < ns; s += kThreads) M = fmaxf(M, p.part_ml[s * TH + row].x);
  M = warp_max(M);
  if (lane == 0) red_m[warp] = M;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < NW; ++w) M = fmaxf(M, red_m[w]);
  if (M == -INFINITY) {  // every key masked
    if (warp == 0 && d < D) out[d] = 0.f;
    if (warp == 0 && p.q8.q) q8_store_block(p.q8, t, int64_t(h) * (D / 32) + blockIdx.y, 0.f);
    return;
  }
  float L = 0.f;
  for (int s = tid; s < ns; s += kThreads) {
    const float2 ml = p.part_ml[s * TH + row];
    const float w = fast_exp2(ml.x - M);  // 0 for an empty split (max -inf)
    wsh[s] = w;
    L += w * ml.y;
  }
  L = warp_sum(L);
  if (lane == 0) red_l[warp] = L;
  __syncthreads();
  float a = 0.f;
  if (d < D) {
#pragma unroll 4
    for (int s = warp; s < ns; s += NW) {
      const float w = wsh[s];
      if (w != 0.f) a = fmaf(w, p.part_o[(s * TH + row) * D + d], a);
    }
  }
  red_a[warp][lane] = a;
  __syncthreads();
  if (warp == 0 && d < D) {
    float sa = 0.f, sl = 0.f;
#pragma unroll
    for (int w = 0; w < NW; ++w) sa += red_a[w][lane], sl += red_l[w];
    out[d] = sa / sl;
    // D % 32 == 0 here: the warp's 32 dims are one block of the product's x.
    if (p.q8.q) q8_store_block(p.q8, t, int64_t(h) * (D / 32) + blockIdx.y, sa / sl);
  }
}

// q8_to_half: an 8-bit cache's cells [0, S) as halves, [S][Hkv][D], for
// attn_mma (prefill over an 8-bit cache reads them as an f16 cache). A
// thread a 32-element block; half(d * q), as attn_dec's conversion.
__global__ void __launch_bounds__(256) q8_to_half(const char* src, int64_t nb1, int64_t nb2, int Hkv, int D, int S,
                                                  __half* dst) {
  pdl_wait();
  const int nbk = D / 32;
  const int64_t n = int64_t(S) * Hkv * nbk;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int b = int(i % nbk);
    const int64_t r = i / nbk, j = r / Hkv;
    const int g = int(r % Hkv);
    const char* blk = src + j * nb2 + g * nb1 + b * kQ8Bytes;
    const float d = __half2float(*reinterpret_cast<const __half*>(blk));
    const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
    __half2* o = reinterpret_cast<__half2*>(dst + (j * Hkv + g) * D + b * 32);
#pragma unroll
    for (int e = 0; e < 16; ++e) o[e] = __floats2half2_rn(d * float(q[2 * e]), d * float(q[2 * e + 1]));
  }
}

// ---------------------------------------------------------------------------
// Host side: plans and launches.

struct Shape {
  int64_t D = 0, Hq = 0, Hkv = 0, T = 0, S = 0;
  int64_t span = 0;  // keys a block of one sequence's tokens may see: S, or less by graph.h's max_keys hint
  bool f16 = false;
  bool q8 = false;        // 8-bit cache (q8_0 blocks)
  bool separate = false;  // no two tokens see the same keys (graph.h's hint)
  const CudaOptions* o = nullptr;  // the plan's knobs (attn_wide, attn_strided, attn_blocks, attn_rows)
};

struct Plan {
  bool mma = false;
  bool dec = false;           // attn_dec (decode on tensor cores)
  int cluster = 0;            // attn_dec: the splits as one cluster, merged in it (splits blocks; 0: attn_combine)
  int L = 8, R = 1, TK = 1;   // attn_vec
  int threads = kThreads;     // attn_vec
  int splits = 1, chunk = 0;  // attn_vec: keys per split
  bool strided = false;       // attn_vec: split s takes every splits-th tile from tile s (chunk = S)
  int n_rchunks = 0;          // attn_mma: ranges per token
  size_t ranges_bytes = 0, ml_bytes = 0, o_bytes = 0;
  size_t scratch() const { return ranges_bytes + ml_bytes + o_bytes; }
};

size_t round256(size_t n) { return (n + 255) / 256 * 256; }
int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool mma_dims(int64_t D) { return D == 64 || D == 128 || D == 256; }

// Splits for `base` blocks of work over `ntiles` key tiles: none from
// `enough` blocks on, else about `aim` blocks in all.
int pick_splits(int64_t base, int64_t ntiles, int64_t enough, int64_t aim, const Shape& s) {
  if (base >= enough || ntiles <= 1) return 1;
  int64_t n = std::min<int64_t>({cdiv(aim, base), ntiles, kMaxSplits});
  const size_t per_split = size_t(s.T) * size_t(s.Hq) * (size_t(s.D) * 4 + 8);
  n = std::min<int64_t>(n, std::max<int64_t>(1, int64_t(kMaxPartialBytes / per_split)));
  return int(std::max<int64_t>(n, 1));
}

void set_partials(Plan& pl, const Shape& s) {
  pl.ml_bytes = pl.o_bytes = 0;
  if (pl.splits > 1 && !pl.cluster) {
    const size_t n = size_t(pl.splits) * size_t(s.T) * size_t(s.Hq);
    pl.ml_bytes = round256(n * sizeof(float2));
    pl.o_bytes = round256(n * size_t(s.D) * sizeof(float));
  }
}

Plan plan_vec(const Shape& s, int sm, int max_splits = kMaxSplits) {
  Plan pl;
  const int64_t G = s.Hq / s.Hkv, rows = s.T * G, dc = s.D / 8;
  while (pl.L < dc) pl.L *= 2;
  // Separate tokens: a block takes rows of one token only (R divides G), so
  // it reads that token's keys alone.
  if (s.separate)
    while (pl.R < kVecMaxRows && G % (2 * pl.R) == 0) pl.R *= 2;
  else
    while (pl.R < rows && pl.R < kVecMaxRows && pl.R < s.o->attn_rows) pl.R *= 2;
  const int kpt = (s.f16 || s.q8 ? 8 : 4) / (pl.R == 8 ? 2 : 1);
  pl.TK = kThreads / pl.L * kpt;
  const int64_t ntiles = cdiv(s.S, pl.TK);
  const int64_t base = cdiv(rows, pl.R) * s.Hkv;
  const int64_t aim = std::max(1, s.o->attn_blocks) * int64_t(sm);
  int n = std::min(max_splits, pick_splits(base, cdiv(s.S, std::max(pl.TK, kMinSplitKeys)), aim, aim, s));
  // Strided splits (CudaOptions::attn_strided): split s takes tiles s,
  // s + n, s + 2n, ..., so a sliding window deep in the cache (gemma3's
  // local layers) runs on as many splits as it has tiles rather than on
  // the one or two whose chunk holds it; else fixed chunks of the cache.
  pl.strided = s.o->attn_strided && n > 1 && !s.separate;
  if (n > 1 && !pl.strided) {
    pl.chunk = int(cdiv(ntiles, n) * pl.TK);
    n = int(cdiv(s.S, pl.chunk));
  }
  // A short span (tg at a shallow depth: S <= 256 keys for D = 128, 512 for
  // D = 64) in one split of 256 threads, at most two tiles a block, rather
  // than several splits and a merging launch (attn_combine) after them; a
  // block a query head (R = 1), so that a kv head's G heads run on G SMs: the
  // blocks wait on memory, not on each other (one block of G rows per kv
  // head was slower: H100 tg128, 8B Q4_K_M -3.4%, 1B Q4_0 -4.2%). Their K
  // and V loads after the first come from L2.
  // The same where the span fits one split but the grid would be small
  // (attn_wide >= 2: gemma3's 4 heads of one kv head on one block of 128
  // threads otherwise).
  // CudaOptions::attn_wide 0: splits as for long spans (for comparisons).
  const int wide = s.o->attn_wide;
  const bool small = n == 1 && base < sm && wide >= 2;
  if (wide && (n > 1 || small) && (s.f16 || s.q8) && !s.separate) {
    // 256-dim heads (a key a warp): 512 threads, so that a tile is 128
    // keys and gemma3's spans up to 256 need no merging launch (attn_wide 3).
    const int wt = wide >= 3 && pl.L == 32 ? kWiderThreads : kWideThreads;
    const int tk = wt / pl.L * 8;  // 8 keys a thread a tile (f16 or q8, R = 1)
    if (s.S <= 2 * int64_t(tk)) pl.threads = wt, pl.TK = tk, pl.R = 1, n = 1;
  }
  pl.splits = std::max(n, 1);
  if (pl.splits == 1) pl.strided = false;
  if (pl.splits == 1 || pl.strided) pl.chunk = int(std::max<int64_t>(s.S, 1));
  if (s.separate) {  // one pass over the mask finds every token's span
    pl.n_rchunks = int(std::max<int64_t>(1, cdiv(s.S, kRangeChunk)));
    pl.ranges_bytes = round256(size_t(s.T) * size_t(pl.n_rchunks) * sizeof(int2));
  }
  set_partials(pl, s);
  return pl;
}

constexpr int kDecStages = 2;         // attn_dec's stages merged by attn_combine (2 blocks an SM)
constexpr int kMaxClusterTiles = 2;   // attn_cluster 1: clusters where a split has at most this many tiles
constexpr int kDecClusterStages = 3;  // and in clusters (3 and 4 measured alike; 3 leaves room for 2 blocks an SM)

// attn_dec's shared memory with NST stages (F16 tiles, or 8-bit ones and a
// tile of halves).
template <int D, typename KV>
constexpr int dec_smem(int nst) {
  return std::is_same_v<KV, Q8Block> ? DecCfg<D>::q8_smem_bytes(nst) : DecCfg<D>::smem_bytes(nst);
}
template <int D, typename KV>
int dec_cluster_smem() {
  return dec_smem<D, KV>(kDecClusterStages);
}

// Sets `kernel`'s attribute on this device, once a device (`done` keeps a
// bit per device).
template <typename Kernel>
void set_attribute_once(Kernel kernel, cudaFuncAttribute attr, int value, std::atomic<uint64_t>& done) {
  int dev = 0;
  WEIR_CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = dev < 64 ? uint64_t(1) << dev : 0;
  if (!bit || !(done.load(std::memory_order_relaxed) & bit)) {
    WEIR_CUDA_CHECK(cudaFuncSetAttribute(kernel, attr, value));
    done.fetch_or(bit, std::memory_order_relaxed);
  }
}
// Lets `kernel` take `bytes` of dynamic shared memory on this device.
template <typename Kernel>
void allow_smem(Kernel kernel, int bytes, std::atomic<uint64_t>& raised) {
  set_attribute_once(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes, raised);
}

// Clusters of `cs` blocks of attn_dec<D> in clusters that the device runs at
// once (the occupancy API, asked once a device and size); 0 where it cannot.
// Its shared memory and cluster size are raised here, once a device.
template <int D, typename KV>
int dec_active_clusters(int cs) {
  constexpr auto kernel = attn_dec<D, kDecClusterStages, true, KV>;
  if (!clusters_supported()) return 0;
  static std::atomic<uint64_t> raised{0}, large{0};
  allow_smem(kernel, dec_cluster_smem<D, KV>(), raised);
  set_attribute_once(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1, large);
  return active_clusters<kernel>(DecCfg<D>::TH, size_t(dec_cluster_smem<D, KV>()), cs);
}
template <typename KV>
int dec_active_clusters(int64_t D, int cs) {
  switch (D) {
    case 64: return dec_active_clusters<64, KV>(cs);
    case 128: return dec_active_clusters<128, KV>(cs);
    default: return dec_active_clusters<256, KV>(cs);
  }
}
int dec_active_clusters(const Shape& s, int cs) {
  return s.q8 ? dec_active_clusters<Q8Block>(s.D, cs) : dec_active_clusters<__half>(s.D, cs);
}

// attn_dec: blocks of 8 rows per kv head, strided splits aiming for
// attn_blocks blocks an SM (as attn_vec's), no more than the span's tiles
// (a sliding window's: graph.h's max_keys hint). Clusters (CudaOptions::
// attn_cluster; not with `no_cluster`, the scratch bound): a (row block, kv
// head)'s splits as one cluster, merged inside it, where all the clusters
// run at once and (attn_cluster 1) a split has at most 2 tiles, as many as
// the merging launch's plan gives a split at depth 4,096: there the launch
// saved is the gain (H100, tg128: 8B +2.0% and 1B +1.4% at depth 1,024,
// gemma3's 512-key windows +3.4% at 4,096). With 3 tiles a split (depth
// 2,048 to 3,072) clusters measured even (8B -0.7 / -0.2%, 1B -0.3 /
// +0.5%), with 4 (4,096: 16 splits for 33) slower (8B -0.8%, 1B -3.2%;
// docs/perf.md).
Plan plan_dec(const Shape& s, int sm, int max_splits = kMaxSplits, bool no_cluster = false) {
  Plan pl;
  pl.dec = true;
  const int64_t rows = s.T * (s.Hq / s.Hkv);
  pl.R = kDecRows;
  pl.TK = s.D >= 256 ? DecCfg<256>::BN : DecCfg<128>::BN;
  pl.threads = s.D >= 256 ? DecCfg<256>::TH : DecCfg<128>::TH;
  const int64_t base = cdiv(rows, kDecRows) * s.Hkv;
  const int64_t aim = std::max(1, s.o->attn_blocks) * int64_t(sm);
  // Splits of a tile at the least (32 keys for 256-dim heads: gemma3's
  // window of 512 on 16 splits, not 8 of 64 keys: tg128 at depth 4,096
  // -2.4% with 8).
  const int64_t ntiles = cdiv(s.span, pl.TK);
  pl.splits = std::max(1, std::min(max_splits, pick_splits(base, ntiles, aim, aim, s)));
  const int want = s.o->attn_cluster;
  if (!no_cluster && want >= 1 && pl.splits > 1) {
    const int most = want == 1 ? kMaxClusterBlocks : std::min(want, kMaxClusterBlocks);
    int cs = int(std::min<int64_t>({most, pl.splits, ntiles}));
    if (want == 1 && cdiv(ntiles, cs) > kMaxClusterTiles) cs = 0;
    while (cs >= 2 && dec_active_clusters(s, cs) < base) cs /= 2;
    if (cs >= 2) pl.splits = pl.cluster = cs;
  }
  set_partials(pl, s);  // (always strided: the kernel reads neither strided nor chunk)
  return pl;
}

Plan plan_mma(const Shape& s, int sm, int max_splits = kMaxSplits) {
  Plan pl;
  pl.mma = true;
  const int64_t G = s.Hq / s.Hkv, rows = s.T * G;
  const int bn = s.D >= 256 ? MmaCfg<256>::BN : MmaCfg<128>::BN;
  pl.splits = std::min(
      max_splits, pick_splits(cdiv(rows, kBM) * s.Hkv, cdiv(s.S, std::max(bn, kMinSplitKeys)), sm, 2 * int64_t(sm), s));
  pl.n_rchunks = int(std::max<int64_t>(1, cdiv(s.S, kRangeChunk)));
  pl.ranges_bytes = round256(size_t(s.T) * size_t(pl.n_rchunks) * sizeof(int2));
  set_partials(pl, s);
  return pl;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Operand checks; fills the shape. Throws weir::Error naming dst.
Shape check(const Tensor& dst, const CudaOptions& o) {
  const Tensor* q = dst.src[0];
  const Tensor* k = dst.src[1];
  const Tensor* v = dst.src[2];
  const Tensor* mask = dst.src[3];
  const std::string where = "attention " + dst.name;
  if (!q || !k || !v || !mask) throw Error(where + ": missing operands");
  auto shape = [](const Tensor* t) {
    return t->name + "[" + std::to_string(t->ne[0]) + "," + std::to_string(t->ne[1]) + "," + std::to_string(t->ne[2]) +
           "," + std::to_string(t->ne[3]) + "]";
  };
  if (q->dtype != DType::F32 || q->nb[0] != 4 || q->nb[1] % 4 || q->nb[2] % 4)
    throw Error(where + ": q " + q->name + " must be F32 with contiguous rows and strides a multiple of 4");
  if (k->dtype != v->dtype) throw Error(where + ": k and v must have the same dtype");
  for (const Tensor* kv : {k, v}) {
    // Q8_0: heads of whole blocks (D % 32), blocks back to back, 2-byte aligned.
    const bool q8 = kv->dtype == DType::Q8_0;
    const size_t es = kv->dtype == DType::F32 ? 4 : kv->dtype == DType::F16 || q8 ? 2 : 0;
    if (es == 0 || kv->nb[0] != (q8 ? size_t(kQ8Bytes) : es) || kv->nb[1] % es || kv->nb[2] % es ||
        reinterpret_cast<uintptr_t>(kv->data) % es || (q8 && kv->ne[0] % 32))
      throw Error(where + ": " + kv->name + " must be F32, F16 or Q8_0 with contiguous rows");
  }
  if (mask->dtype != DType::F32 || mask->nb[0] != 4 || mask->nb[1] % 4)
    throw Error(where + ": mask " + mask->name + " must be F32 with contiguous rows");
  if (dst.dtype != DType::F32 || dst.nb[0] != 4 || dst.nb[1] % 4) throw Error(where + ": output must be F32");
  Shape s;
  s.D = q->ne[0], s.Hq = q->ne[1], s.T = q->ne[2], s.Hkv = k->ne[1], s.S = k->ne[2];
  s.f16 = k->dtype == DType::F16;
  s.q8 = k->dtype == DType::Q8_0;
  // CudaOptions::attn_separate off ignores the hint (for comparisons).
  s.separate = o.attn_separate && dst.iparams[0] != 0 && q->ne[2] > 1;
  s.span = dst.iparams[1] > 0 ? std::min<int64_t>(s.S, int64_t(dst.iparams[1]) + s.T - 1) : s.S;
  s.o = &o;
  if (k->ne[0] != s.D || v->ne[0] != s.D || v->ne[1] != s.Hkv || v->ne[2] != s.S || s.Hkv <= 0 || s.Hq % s.Hkv != 0 ||
      mask->ne[0] != s.S || mask->ne[1] != s.T || dst.ne[0] != s.D * s.Hq || dst.ne[1] != s.T || q->ne[3] != 1 ||
      k->ne[3] != 1 || v->ne[3] != 1 || mask->ne[2] != 1 || mask->ne[3] != 1)
    throw Error(where + ": shapes q " + shape(q) + ", k " + shape(k) + ", v " + shape(v) + ", mask " + shape(mask) +
                " do not fit");
  if (s.D <= 0 || s.D % 8 != 0 || s.D > 256)
    throw Error(where + ": head size " + std::to_string(s.D) + " not supported (a multiple of 8 up to 256)");
  if (s.T * s.Hq > INT32_MAX / 2 || s.S > INT32_MAX / 2) throw Error(where + ": too many tokens or keys");
  return s;
}

bool mma_eligible(const Shape& s) {
  return s.f16 && mma_dims(s.D) && s.T * (s.Hq / s.Hkv) > kVecMaxRows && !s.separate;
}

// Prefill over an 8-bit cache: its cells turned into halves in scratch
// (q8_to_half), then attn_mma on them, where that copy stays under
// kMaxHalfCopy (attn_vec on the blocks otherwise: H100 pp512 at depth
// 4,096, 8B Q4_K_M, 5,924 t/s on attn_vec against 13,801 with an f16 cache).
constexpr size_t kMaxHalfCopy = size_t(256) << 20;
// The shape as the kernels see an 8-bit cache once copied into halves.
Shape as_halves(Shape s) {
  s.f16 = true, s.q8 = false;
  return s;
}
size_t half_copy_bytes(const Shape& s) {
  if (!s.q8 || !mma_eligible(as_halves(s))) return 0;
  const size_t one = round256(size_t(s.S) * size_t(s.Hkv) * size_t(s.D) * 2);
  return 2 * one <= kMaxHalfCopy ? 2 * one : 0;
}

// attn_dec takes what attn_vec would take with its 128-thread blocks (not
// the short spans' one split of a head a block) where the cache is F16 and
// D in {64, 128, 256} (CudaOptions::attn_dec).
// 8-bit caches too, their stages copied in pieces of DecCfg<D>::CW bytes
// (dec_aligned).
bool dec_eligible(const Shape& s) { return s.o->attn_dec && (s.f16 || s.q8) && mma_dims(s.D) && !s.separate; }

// Whether attn_dec can copy k's and v's rows into its stages: 16-byte
// pieces of F16 rows (Params::kv16), 8-bit rows in pieces of CW bytes.
bool dec_aligned(const Shape& s, const Tensor& k, const Tensor& v, bool kv16) {
  if (!s.q8) return kv16;
  const size_t cw = s.D == 256 ? DecCfg<256>::CW : s.D == 128 ? DecCfg<128>::CW : DecCfg<64>::CW;
  for (const Tensor* t : {&k, &v})
    if (reinterpret_cast<uintptr_t>(t->data) % cw || t->nb[1] % cw || t->nb[2] % cw) return false;
  return true;
}

template <int L, int R, typename KV>
void launch_vec_kv(const Params& p, int threads, dim3 grid, cudaStream_t st) {
  if constexpr (R == 1 && !std::is_same_v<KV, float>) {
    if (threads == kWideThreads) return launch_kernel(attn_vec<L, R, KV, kWideThreads>, grid, kWideThreads, 0, st, p);
    if constexpr (L == 32)
      if (threads == kWiderThreads)
        return launch_kernel(attn_vec<L, R, KV, kWiderThreads>, grid, kWiderThreads, 0, st, p);
  }
  if (threads != kThreads) throw Error("attention: no attn_vec of " + std::to_string(threads) + " threads");
  launch_kernel(attn_vec<L, R, KV, kThreads>, grid, kThreads, 0, st, p);
}
template <int L, int R>
void launch_vec_r(const Params& p, const Shape& s, int threads, dim3 grid, cudaStream_t st) {
  if (s.q8) return launch_vec_kv<L, R, Q8Block>(p, threads, grid, st);
  if (s.f16) return launch_vec_kv<L, R, __half>(p, threads, grid, st);
  launch_vec_kv<L, R, float>(p, threads, grid, st);
}
template <int L>
void launch_vec_l(const Params& p, const Shape& s, int R, int threads, dim3 grid, cudaStream_t st) {
  switch (R) {
    case 1: return launch_vec_r<L, 1>(p, s, threads, grid, st);
    case 2: return launch_vec_r<L, 2>(p, s, threads, grid, st);
    case 4: return launch_vec_r<L, 4>(p, s, threads, grid, st);
    default: return launch_vec_r<L, 8>(p, s, threads, grid, st);
  }
}

template <int D>
void launch_mma(const Params& p, dim3 grid, cudaStream_t st) {
  static std::atomic<uint64_t> raised{0};
  allow_smem(attn_mma<D>, MmaCfg<D>::smem_bytes, raised);
  launch_kernel(attn_mma<D>, grid, kThreads, MmaCfg<D>::smem_bytes, st, p);
}

template <int D, typename KV>
void launch_dec(const Params& p, dim3 grid, int cluster, cudaStream_t st) {
  if (cluster) {  // (dec_active_clusters raised its shared memory and cluster size)
    launch_kernel_in_clusters(attn_dec<D, kDecClusterStages, true, KV>, grid, DecCfg<D>::TH,
                              dec_cluster_smem<D, KV>(), st, dim3(1, 1, unsigned(cluster)), p);
    return;
  }
  static std::atomic<uint64_t> raised{0};
  constexpr int smem = dec_smem<D, KV>(kDecStages);
  allow_smem(attn_dec<D, kDecStages, false, KV>, smem, raised);
  launch_kernel(attn_dec<D, kDecStages, false, KV>, grid, DecCfg<D>::TH, smem, st, p);
}
template <typename KV>
void launch_dec(const Params& p, int64_t D, dim3 grid, int cluster, cudaStream_t st) {
  switch (D) {
    case 64: return launch_dec<64, KV>(p, grid, cluster, st);
    case 128: return launch_dec<128, KV>(p, grid, cluster, st);
    default: return launch_dec<256, KV>(p, grid, cluster, st);
  }
}

}  // namespace

// Scratch ahead of the partials for the output as 8-bit blocks (OpCtx::
// quantize_out: the decode product after attention reads them there).
size_t q8_reserve(const Shape& s) {
  return s.T <= kMaxQ8Tokens && s.D % 32 == 0 ? round256(q8_act_bytes(s.D * s.Hq, s.T)) : 0;
}

size_t attention_scratch_bytes(const Tensor& dst, const CudaOptions& o) {
  Shape s;
  try {
    s = check(dst, o);
  } catch (const Error&) {
    return 0;  // op_attention reports it
  }
  if (s.T == 0) return 0;
  size_t n = plan_vec(s, kMaxSms).scratch();
  if (mma_eligible(s)) n = std::max(n, plan_mma(s, kMaxSms).scratch());
  if (dec_eligible(s)) n = std::max(n, plan_dec(s, kMaxSms, kMaxSplits, true).scratch());
  if (const size_t hc = half_copy_bytes(s)) n = std::max(n, hc + plan_mma(as_halves(s), kMaxSms).scratch());
  return n + q8_reserve(s);
}

void op_attention(const Tensor& dst, const OpCtx& c) {
  Shape s = check(dst, c.options());
  if (s.T == 0) return;
  const Tensor* q = dst.src[0];
  const Tensor* k = dst.src[1];
  const Tensor* v = dst.src[2];
  const Tensor* mask = dst.src[3];
  const int sm = std::clamp(c.sm_count, 1, kMaxSms);

  Params p{};
  p.q = static_cast<const float*>(q->data);
  p.q_nb1 = int64_t(q->nb[1] / 4), p.q_nb2 = int64_t(q->nb[2] / 4);
  p.k = static_cast<const char*>(k->data), p.v = static_cast<const char*>(v->data);
  p.k_nb1 = int64_t(k->nb[1]), p.k_nb2 = int64_t(k->nb[2]);
  p.v_nb1 = int64_t(v->nb[1]), p.v_nb2 = int64_t(v->nb[2]);
  p.mask = static_cast<const float*>(mask->data), p.m_nb1 = int64_t(mask->nb[1] / 4);
  p.out = static_cast<float*>(dst.data), p.o_nb1 = int64_t(dst.nb[1] / 4);
  p.D = int(s.D), p.Hq = int(s.Hq), p.G = int(s.Hq / s.Hkv), p.T = int(s.T), p.S = int(s.S);
  p.rows = p.T * p.G;
  p.qscale = dst.fparams[0] * kLog2e;
  p.q16 = aligned16(q->data) && q->nb[1] % 16 == 0 && q->nb[2] % 16 == 0;
  p.mask_early = c.w_fixed && c.options().attn_early_mask;  // off: scanned after pdl_wait()
  p.kv16 = aligned16(k->data) && aligned16(v->data) && k->nb[1] % 16 == 0 && k->nb[2] % 16 == 0 && v->nb[1] % 16 == 0 &&
           v->nb[2] % 16 == 0;
  const bool out8 = (reinterpret_cast<uintptr_t>(dst.data) & 7) == 0 && dst.nb[1] % 8 == 0;

  // The output as 8-bit blocks at the start of scratch (quantize_out), the
  // partials after them.
  const size_t q8_bytes = c.quantize_out ? q8_reserve(s) : 0;
  if (c.quantize_out && (q8_bytes == 0 || q8_bytes > c.scratch_bytes))
    throw Error("attention " + dst.name + ": cannot write its output as 8-bit blocks");
  size_t room = c.scratch_bytes - q8_bytes;
  // Prefill over an 8-bit cache: K and V as halves after the 8-bit output
  // blocks, the partials after them; the rest as over an f16 cache.
  size_t half_bytes = half_copy_bytes(s);
  if (half_bytes && half_bytes <= room) {
    __half* kh = reinterpret_cast<__half*>(static_cast<char*>(c.scratch) + q8_bytes);
    __half* vh = kh + half_bytes / 4;  // (half_bytes: two 256-rounded copies)
    const int64_t n = s.S * s.Hkv * (s.D / 32);
    const unsigned grid = unsigned(std::clamp<int64_t>(cdiv(n, 256), 1, int64_t(c.sm_count) * 8));
    launch_kernel(q8_to_half, grid, 256, 0, c.stream, p.k, p.k_nb1, p.k_nb2, int(s.Hkv), int(s.D), int(s.S), kh);
    WEIR_CUDA_CHECK_LAUNCH();
    launch_kernel(q8_to_half, grid, 256, 0, c.stream, p.v, p.v_nb1, p.v_nb2, int(s.Hkv), int(s.D), int(s.S), vh);
    WEIR_CUDA_CHECK_LAUNCH();
    p.k = reinterpret_cast<const char*>(kh), p.v = reinterpret_cast<const char*>(vh);
    p.k_nb1 = p.v_nb1 = s.D * 2, p.k_nb2 = p.v_nb2 = s.Hkv * s.D * 2;
    p.kv16 = true;
    s = as_halves(s);
    room -= half_bytes;
  } else {
    half_bytes = 0;
  }
  // The path, and splits that fit the scratch memory the plan gave: each
  // planner's splits halved until its partials fit.
  Plan pl;
  bool fits = false;
  const auto fit = [&](auto planner) {
    for (int ms = kMaxSplits; !fits; ms = pl.splits / 2) {
      pl = planner(s, sm, ms);
      fits = pl.scratch() <= room;
      if (pl.splits == 1) break;
    }
  };
  if (mma_eligible(s) && p.kv16 && out8) fit(plan_mma);
  if (!fits && dec_eligible(s) && dec_aligned(s, *k, *v, p.kv16) && plan_vec(s, sm).threads == kThreads)
    fit([](const Shape& sh, int n, int ms) { return plan_dec(sh, n, ms); });  // (clusters allowed)
  if (!fits) fit(plan_vec);
  if (!fits) throw Error("attention " + dst.name + ": scratch memory too small");
  char* scratch = static_cast<char*>(c.scratch) + q8_bytes + half_bytes;
  p.ranges = pl.ranges_bytes ? reinterpret_cast<const int2*>(scratch) : nullptr;
  p.part_ml = pl.ml_bytes ? reinterpret_cast<float2*>(scratch + pl.ranges_bytes) : nullptr;
  p.part_o = pl.o_bytes ? reinterpret_cast<float*>(scratch + pl.ranges_bytes + pl.ml_bytes) : nullptr;
  p.splits = pl.splits;
  p.chunk = pl.chunk;
  p.strided = pl.strided;
  p.n_rchunks = pl.n_rchunks;
  // The 8-bit blocks for the product after: attn_combine writes them, or
  // attn_vec or attn_dec with one split.
  if (c.quantize_out) p.q8 = Q8Act::in(c.scratch, s.D * s.Hq, s.T);

  if (pl.ranges_bytes) {
    const bool m16 = aligned16(mask->data) && mask->nb[1] % 16 == 0;
    launch_kernel(attn_ranges, dim3(unsigned(s.T), unsigned(pl.n_rchunks)), 256, 0, c.stream, p.mask, p.m_nb1, p.S, m16,
                  const_cast<int2*>(p.ranges));
    WEIR_CUDA_CHECK_LAUNCH();
  }
  if (pl.mma) {
    const dim3 grid(unsigned(cdiv(p.rows, kBM)), unsigned(s.Hkv), unsigned(pl.splits));
    switch (s.D) {
      case 64: launch_mma<64>(p, grid, c.stream); break;
      case 128: launch_mma<128>(p, grid, c.stream); break;
      default: launch_mma<256>(p, grid, c.stream); break;
    }
  } else if (pl.dec) {
    const dim3 grid(unsigned(cdiv(p.rows, kDecRows)), unsigned(s.Hkv), unsigned(pl.splits));
    if (s.q8)
      launch_dec<Q8Block>(p, s.D, grid, pl.cluster, c.stream);
    else
      launch_dec<__half>(p, s.D, grid, pl.cluster, c.stream);
  } else {
    const dim3 grid(unsigned(cdiv(p.rows, pl.R)), unsigned(s.Hkv), unsigned(pl.splits));
    switch (pl.L) {
      case 8: launch_vec_l<8>(p, s, pl.R, pl.threads, grid, c.stream); break;
      case 16: launch_vec_l<16>(p, s, pl.R, pl.threads, grid, c.stream); break;
      default: launch_vec_l<32>(p, s, pl.R, pl.threads, grid, c.stream); break;
    }
  }
  WEIR_CUDA_CHECK_LAUNCH();
  if (pl.splits > 1 && !pl.cluster) {
    launch_kernel(attn_combine, dim3(unsigned(s.T * s.Hq), unsigned(cdiv(s.D, 32))), kThreads, 0, c.stream, p);
    WEIR_CUDA_CHECK_LAUNCH();
  } else if (c.quantize_out && pl.mma) {
    q8_quantize_rows(dst, c);  // attn_mma's own output does not write them
    WEIR_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace weir::cuda
