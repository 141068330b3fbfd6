// attention (core/graph.h) on the GPU: q F32 [D, Hq, T], k and v F16, F32
// or Q8_0 (the 8-bit cache, -ctk q8_0: heads of whole 34-byte blocks)
// [D, Hkv, S] (KV cache views), mask F32 [S, T] of 0 / -inf, scale, and
// optionally a soft cap and per-head sinks; output F32 [D*Hq, T]. Same
// semantics as the CPU reference (backend/cpu/ops_attention.cpp): s_j =
// q.k_j * scale (capped: cap * tanh(s_j / cap)) + mask_j, softmax over the
// keys that are not masked and the head's sink, out = sum_j p_j v_j; a row
// with every key masked is 0. The cap is applied where each kernel finishes
// a score (capped_score), the sink where a row is normalized
// (softmax_inverse; attn_combine for splits).
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
  // The head's sink (graph.h) as one more key of no value: it raises the
  // maximum and the sum, not the weighted values.
  const float sink = p.sinks ? __ldg(p.sinks + h) * kLog2e : -INFINITY;
  M = fmaxf(M, sink);
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
    if (p.sinks) sl += fast_exp2(sink - M);
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
// Host side: launches (the plans: plan/attention_rules.h).

static_assert(sizeof(int2) == kRangeBytes && sizeof(float2) == kMaxSumBytes, "the plans' scratch sizes");

constexpr int kDecStages = 2;         // attn_dec's stages merged by attn_combine (2 blocks an SM)
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

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

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
void launch_attn_vec_for_cache(const Params& p, int threads, dim3 grid, LaunchStream st) {
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
void launch_attn_vec_for_rows(const Params& p, const Shape& s, int threads, dim3 grid, LaunchStream st) {
  if (s.q8) return launch_attn_vec_for_cache<L, R, Q8Block>(p, threads, grid, st);
  if (s.f16) return launch_attn_vec_for_cache<L, R, __half>(p, threads, grid, st);
  launch_attn_vec_for_cache<L, R, float>(p, threads, grid, st);
}
template <int L>
void launch_attn_vec(const Params& p, const Shape& s, int R, int threads, dim3 grid, LaunchStream st) {
  switch (R) {
    case 1: return launch_attn_vec_for_rows<L, 1>(p, s, threads, grid, st);
    case 2: return launch_attn_vec_for_rows<L, 2>(p, s, threads, grid, st);
    case 4: return launch_attn_vec_for_rows<L, 4>(p, s, threads, grid, st);
    default: return launch_attn_vec_for_rows<L, 8>(p, s, threads, grid, st);
  }
}

template <int D>
void launch_mma(const Params& p, dim3 grid, LaunchStream st) {
  static std::atomic<uint64_t> raised{0};
  allow_smem(attn_mma<D>, MmaCfg<D>::smem_bytes, raised);
  launch_kernel(attn_mma<D>, grid, kThreads, MmaCfg<D>::smem_bytes, st, p);
}

template <int D, typename KV>
void launch_dec(const Params& p, dim3 grid, int cluster, LaunchStream st) {
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
void launch_dec(const Params& p, int64_t D, dim3 grid, int cluster, LaunchStream st) {
  switch (D) {
    case 64: return launch_dec<64, KV>(p, grid, cluster, st);
    case 128: return launch_dec<128, KV>(p, grid, cluster, st);
    default: return launch_dec<256, KV>(p, grid, cluster, st);
  }
}

}  // namespace

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
  // A soft cap (graph.h) takes the plain scale's scores; the kernels cap
  // them and go to log2 units after.
  p.cap = dst.fparams[1] > 0.f ? dst.fparams[1] : 0.f;
  p.inv_cap = p.cap > 0.f ? 1.f / p.cap : 0.f;
  p.qscale = p.cap > 0.f ? dst.fparams[0] : dst.fparams[0] * kLog2e;
  p.sinks = dst.src[4] ? static_cast<const float*>(dst.src[4]->data) : nullptr;
  p.q16 = aligned16(q->data) && q->nb[1] % 16 == 0 && q->nb[2] % 16 == 0;
  p.mask_early = c.weights_constant && c.options().attn_early_mask;  // off: scanned after pdl_wait()
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
    launch_kernel(q8_to_half, grid, 256, 0, c.launch_stream(), p.k, p.k_nb1, p.k_nb2, int(s.Hkv), int(s.D), int(s.S),
                  kh);
    WEIR_CUDA_CHECK_LAUNCH();
    launch_kernel(q8_to_half, grid, 256, 0, c.launch_stream(), p.v, p.v_nb1, p.v_nb2, int(s.Hkv), int(s.D), int(s.S),
                  vh);
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
    fit([](const Shape& sh, int n, int ms) { return plan_dec(sh, n, ms, dec_active_clusters); });  // (clusters allowed)
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
    launch_kernel(attn_ranges, dim3(unsigned(s.T), unsigned(pl.n_rchunks)), 256, 0, c.launch_stream(), p.mask, p.m_nb1,
                  p.S, m16, const_cast<int2*>(p.ranges));
    WEIR_CUDA_CHECK_LAUNCH();
  }
  if (pl.mma) {
    const dim3 grid(unsigned(cdiv(p.rows, kBM)), unsigned(s.Hkv), unsigned(pl.splits));
    switch (s.D) {
      case 64: launch_mma<64>(p, grid, c.launch_stream()); break;
      case 128: launch_mma<128>(p, grid, c.launch_stream()); break;
      default: launch_mma<256>(p, grid, c.launch_stream()); break;
    }
  } else if (pl.dec) {
    const dim3 grid(unsigned(cdiv(p.rows, kDecRows)), unsigned(s.Hkv), unsigned(pl.splits));
    if (s.q8)
      launch_dec<Q8Block>(p, s.D, grid, pl.cluster, c.launch_stream());
    else
      launch_dec<__half>(p, s.D, grid, pl.cluster, c.launch_stream());
  } else {
    const dim3 grid(unsigned(cdiv(p.rows, pl.R)), unsigned(s.Hkv), unsigned(pl.splits));
    switch (pl.L) {
      case 8: launch_attn_vec<8>(p, s, pl.R, pl.threads, grid, c.launch_stream()); break;
      case 16: launch_attn_vec<16>(p, s, pl.R, pl.threads, grid, c.launch_stream()); break;
      default: launch_attn_vec<32>(p, s, pl.R, pl.threads, grid, c.launch_stream()); break;
    }
  }
  WEIR_CUDA_CHECK_LAUNCH();
  if (pl.splits > 1 && !pl.cluster) {
    launch_kernel(attn_combine, dim3(unsigned(s.T * s.Hq), unsigned(cdiv(s.D, 32))), kThreads, 0, c.launch_stream(), p);
    WEIR_CUDA_CHECK_LAUNCH();
  } else if (c.quantize_out && pl.mma) {
    q8_quantize_rows(dst, c);  // attn_mma's own output does not write them
    WEIR_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace weir::cuda
