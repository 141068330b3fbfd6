// The attention kernels' plans (ops_attention.cu), asked on the host: the
// planner's scratch bound (attention_scratch_bytes) and the launcher's
// choices.
#include "backend/cuda/plan/attention_rules.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "backend/cuda/plan/kernel_limits.h"
#include "backend/cuda/plan/kernel_rules.h"
#include "backend/cuda/plan/product_rules.h"
#include "core/error.h"

namespace weir::cuda {
namespace attention {
namespace {

constexpr int kMaxClusterTiles = 2;  // attn_cluster 1: clusters where a split has at most this many tiles

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
    pl.ml_bytes = round256(n * kMaxSumBytes);
    pl.o_bytes = round256(n * size_t(s.D) * sizeof(float));
  }
}

}  // namespace

size_t round256(size_t n) { return (n + 255) / 256 * 256; }

bool mma_dims(int64_t D) { return D == 64 || D == 128 || D == 256; }

Plan plan_vec(const Shape& s, int sm, int max_splits) {
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
  // (attn_head_blocks >= 2: gemma3's 4 heads of one kv head on one block of 128
  // threads otherwise).
  // CudaOptions::attn_head_blocks 0: splits as for long spans (for comparisons).
  const int wide = s.o->attn_head_blocks;
  const bool small = n == 1 && base < sm && wide >= 2;
  if (wide && (n > 1 || small) && (s.f16 || s.q8) && !s.separate) {
    // 256-dim heads (a key a warp): 512 threads, so that a tile is 128
    // keys and gemma3's spans up to 256 need no merging launch (attn_head_blocks 3).
    const int wt = wide >= 3 && pl.L == 32 ? kWiderThreads : kWideThreads;
    const int tk = wt / pl.L * 8;  // 8 keys a thread a tile (f16 or q8, R = 1)
    if (s.S <= 2 * int64_t(tk)) pl.threads = wt, pl.TK = tk, pl.R = 1, n = 1;
  }
  pl.splits = std::max(n, 1);
  if (pl.splits == 1) pl.strided = false;
  if (pl.splits == 1 || pl.strided) pl.chunk = int(std::max<int64_t>(s.S, 1));
  if (s.separate) {  // one pass over the mask finds every token's span
    pl.n_rchunks = int(std::max<int64_t>(1, cdiv(s.S, kRangeChunk)));
    pl.ranges_bytes = round256(size_t(s.T) * size_t(pl.n_rchunks) * kRangeBytes);
  }
  set_partials(pl, s);
  return pl;
}

// attn_dec: blocks of 8 rows per kv head, strided splits aiming for
// attn_blocks blocks an SM (as attn_vec's), no more than the span's tiles
// (a sliding window's: graph.h's max_keys hint). Clusters (CudaOptions::
// attn_cluster; none without active_clusters, the scratch bound): a (row
// block, kv head)'s splits as one cluster, merged inside it, where all the clusters
// run at once and (attn_cluster 1) a split has at most 2 tiles, as many as
// the merging launch's plan gives a split at depth 4,096: there the launch
// saved is the gain (H100, tg128: 8B +2.0% and 1B +1.4% at depth 1,024,
// gemma3's 512-key windows +3.4% at 4,096). With 3 tiles a split (depth
// 2,048 to 3,072) clusters measured even (8B -0.7 / -0.2%, 1B -0.3 /
// +0.5%), with 4 (4,096: 16 splits for 33) slower (8B -0.8%, 1B -3.2%;
// docs/perf.md).
Plan plan_dec(const Shape& s, int sm, int max_splits, ActiveClusters active_clusters) {
  Plan pl;
  pl.dec = true;
  const int64_t rows = s.T * (s.Hq / s.Hkv);
  pl.R = kDecRows;
  pl.TK = s.D >= 256 ? dec_keys_per_tile(256) : dec_keys_per_tile(128);
  pl.threads = s.D >= 256 ? dec_threads(256) : dec_threads(128);
  const int64_t base = cdiv(rows, kDecRows) * s.Hkv;
  const int64_t aim = std::max(1, s.o->attn_blocks) * int64_t(sm);
  // Splits of a tile at the least (32 keys for 256-dim heads: gemma3's
  // window of 512 on 16 splits, not 8 of 64 keys: tg128 at depth 4,096
  // -2.4% with 8).
  const int64_t ntiles = cdiv(s.span, pl.TK);
  pl.splits = std::max(1, std::min(max_splits, pick_splits(base, ntiles, aim, aim, s)));
  const int want = s.o->attn_cluster;
  if (active_clusters && want >= 1 && pl.splits > 1) {
    const int most = want == 1 ? kMaxClusterBlocks : std::min(want, kMaxClusterBlocks);
    int cs = int(std::min<int64_t>({most, pl.splits, ntiles}));
    if (want == 1 && cdiv(ntiles, cs) > kMaxClusterTiles) cs = 0;
    while (cs >= 2 && active_clusters(s, cs) < base) cs /= 2;
    if (cs >= 2) pl.splits = pl.cluster = cs;
  }
  set_partials(pl, s);  // (always strided: the kernel reads neither strided nor chunk)
  return pl;
}

Plan plan_mma(const Shape& s, int sm, int max_splits) {
  Plan pl;
  pl.mma = true;
  const int64_t G = s.Hq / s.Hkv, rows = s.T * G;
  const int bn = s.D >= 256 ? mma_keys_per_tile(256) : mma_keys_per_tile(128);
  pl.splits = std::min(
      max_splits, pick_splits(cdiv(rows, kBM) * s.Hkv, cdiv(s.S, std::max(bn, kMinSplitKeys)), sm, 2 * int64_t(sm), s));
  pl.n_rchunks = int(std::max<int64_t>(1, cdiv(s.S, kRangeChunk)));
  pl.ranges_bytes = round256(size_t(s.T) * size_t(pl.n_rchunks) * kRangeBytes);
  set_partials(pl, s);
  return pl;
}

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
  // CudaOptions::attn_sequence_hint off ignores the hint (for comparisons).
  s.separate = o.attn_sequence_hint && dst.iparams[0] != 0 && q->ne[2] > 1;
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
// D in {64, 128, 256} (CudaOptions::attn_decode_mma).
// 8-bit caches too, their stages copied in pieces of DecCfg<D>::CW bytes
// (dec_aligned, ops_attention.cu).
bool dec_eligible(const Shape& s) { return s.o->attn_decode_mma && (s.f16 || s.q8) && mma_dims(s.D) && !s.separate; }

size_t q8_reserve(const Shape& s) {
  return s.T <= kMaxQ8Tokens && s.D % 32 == 0 ? round256(q8_act_bytes(s.D * s.Hq, s.T)) : 0;
}

}  // namespace attention

using namespace attention;

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
  if (dec_eligible(s)) n = std::max(n, plan_dec(s, kMaxSms, kMaxSplits, nullptr).scratch());
  if (const size_t hc = half_copy_bytes(s)) n = std::max(n, hc + plan_mma(as_halves(s), kMaxSms).scratch());
  return n + q8_reserve(s);
}

}  // namespace weir::cuda
