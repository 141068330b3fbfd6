// mul_mat for small batches (batched decode of many sequences, short
// prompts): one kernel that copies W's quantized blocks to shared memory,
// dequantizes them there to fp16 tiles and multiplies those with x on the
// tensor cores (WMMA, fp32 accumulators).
// W is read once per 64 tokens straight from its quantized form, where the
// cuBLAS path writes an fp16 copy of W to memory and reads it back (4x the
// bytes of a Q4_K weight, twice). When the tiles are too few to fill the
// GPU, blocks split K; a second kernel adds their partial sums in a fixed
// order, so results do not depend on scheduling. x comes in fp16 (converted
// once by the caller): half the bytes each block reads.
#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <cstdlib>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/dequant_half.cuh"
#include "backend/cuda/mul_mat_tile.h"
#include "backend/cuda/tile_common.cuh"

namespace weir::cuda {
namespace {

// A block computes BN weight rows x BT tokens. It steps through K by BK
// elements: the quantized bytes of the next step's rows are copied to
// shared memory (cp.async, 16-byte chunks, double-buffered) while this
// step's are dequantized SUB elements at a time into an fp16 tile and
// multiplied; its eight warps take 32 rows x 32 tokens each. fp16 tile rows
// are padded by 8 halves against bank conflicts. x is read once per BN
// rows (from L2): BN = 128 keeps that below twice the weight's bytes.
constexpr int BN = 128, BT = 64, BK = kTileStepK, SUB = 64, LDS = SUB + 8, kThreads = 256;
constexpr int WN = 32, WT = 32;   // one warp's share
constexpr int kMinBlocks = 2;     // per SM: registers for 16 warps in flight
constexpr int kGroups = SUB / 8;  // groups of 8 elements per tile row
// Split K: at most kTileMaxSplits, their partial sums in scratch at most
// kTileMaxPartialBytes (plan/kernel_limits.h; tile_max_splits).

static_assert((BN / WN) * (BT / WT) == kThreads / 32, "warps tile the block");

// Shared memory of the kernel for W type T: the fp16 tiles, then two
// buffers of BN rows of raw bytes; a row is copied from the 16-byte
// boundary below its first byte, so it has 16 bytes of room.
template <DType T>
struct Tile {
  static constexpr int kRawBytes = BK / Q<T>::QK * Q<T>::BYTES;  // a row's bytes per step
  static constexpr int kPitch = (kRawBytes + 15) / 16 * 16 + 16;
  static constexpr int kChunks = kPitch / 16;
  static constexpr size_t kHalfBytes = size_t(BN + BT) * LDS * sizeof(__half);
  static constexpr size_t kSmem = kHalfBytes + 2 * size_t(BN) * kPitch;
};

// Starts copying the bytes of rows n0 .. n0 + BN - 1 for the step at k0
// into buf; bytes past a row's end are zero-filled, never read.
template <DType T>
__device__ __forceinline__ void load_raw(uint8_t* buf, const uint8_t* W, size_t w_stride, int64_t N, int64_t n0,
                                         int64_t k0, int64_t ke) {
  using S = Tile<T>;
  const size_t off = size_t(k0 / Q<T>::QK) * Q<T>::BYTES;
  const size_t len = size_t((std::min<int64_t>(ke - k0, BK) + Q<T>::QK - 1) / Q<T>::QK) * Q<T>::BYTES;
  for (int i = threadIdx.x; i < BN * S::kChunks; i += kThreads) {
    const int r = i / S::kChunks, c = i % S::kChunks;
    if (n0 + r >= N) continue;
    const uintptr_t src = uintptr_t(W + size_t(n0 + r) * w_stride + off);
    const uintptr_t a = (src & ~uintptr_t(15)) + 16 * uintptr_t(c);
    if (a < src + len)
      cp_async16(buf + r * S::kPitch + 16 * c, reinterpret_cast<const void*>(a),
                 int(std::min<uintptr_t>(16, src + len - a)));
  }
}

// y_j [T][N_j] (or split blockIdx.z's partial sums) = W_j [N_j][K] xh [T][K]^T
// over K range [blockIdx.z * k_split, +k_split); xh: x in fp16, rows of K.
template <DType WT_>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    tile_kernel(TileMats m, int64_t K, const __half* __restrict__ xh, int64_t T, int64_t k_split,
                float* __restrict__ part) {
  using namespace nvcuda;
  using S = Tile<WT_>;
  pdl_wait();
  extern __shared__ __align__(128) uint8_t smem[];
  __half* sw = reinterpret_cast<__half*>(smem);
  __half* sx = sw + BN * LDS;
  uint8_t* raw = smem + S::kHalfBytes;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wn = (warp % (BN / WN)) * WN, wt = (warp / (BN / WN)) * WT;
  const int mat = tile_mat_of(m);
  const uint8_t* __restrict__ W = m.w[mat];
  const size_t w_stride = m.stride[mat];
  const int64_t N = m.rows[mat];
  const int64_t n0 = (int64_t(blockIdx.x) - m.first_block[mat]) * BN, t0 = int64_t(blockIdx.y) * BT;
  const int64_t kb = int64_t(blockIdx.z) * k_split, ke = std::min(K, kb + k_split);
  constexpr int QK = Q<WT_>::QK;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[WN / 16][WT / 16];
#pragma unroll
  for (int i = 0; i < WN / 16; ++i)
#pragma unroll
    for (int j = 0; j < WT / 16; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  load_raw<WT_>(raw, W, w_stride, N, n0, kb, ke);
  cp_async_commit();
  for (int64_t k0 = kb, step = 0; k0 < ke; k0 += BK, ++step) {
    const uint8_t* buf = raw + (step & 1) * BN * S::kPitch;
    if (k0 + BK < ke) {
      load_raw<WT_>(raw + ((step + 1) & 1) * BN * S::kPitch, W, w_stride, N, n0, k0 + BK, ke);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const size_t off = size_t(k0 / QK) * Q<WT_>::BYTES;
    for (int sub = 0; sub < BK && k0 + sub < ke; sub += SUB) {
#pragma unroll
      for (int j = 0; j < BT * kGroups / kThreads; ++j) {
        const int i = tid + j * kThreads, r = i / kGroups, g = i % kGroups;
        const int64_t t = t0 + r, k = k0 + sub + 8 * g;
        uint4 v = {0, 0, 0, 0};
        if (t < T && k < ke) v = *reinterpret_cast<const uint4*>(xh + t * K + k);
        *reinterpret_cast<uint4*>(&sx[r * LDS + 8 * g]) = v;
      }
#pragma unroll
      for (int j = 0; j < BN * kGroups / kThreads; ++j) {
        const int i = tid + j * kThreads, r = i / kGroups, g = i % kGroups;
        const int e = sub + 8 * g;  // element within the step
        uint4 v = {0, 0, 0, 0};
        if (n0 + r < N && k0 + e < ke) {
          const int delta = int(uintptr_t(W + size_t(n0 + r) * w_stride + off) & 15);
          v = dq8_half<WT_>(buf + r * S::kPitch + delta + (e / QK) * Q<WT_>::BYTES, (e % QK) / 8);
        }
        *reinterpret_cast<uint4*>(&sw[r * LDS + 8 * g]) = v;
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < SUB; kk += 16) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b[WT / 16];
#pragma unroll
        for (int j = 0; j < WT / 16; ++j) wmma::load_matrix_sync(b[j], sx + (wt + 16 * j) * LDS + kk, LDS);
#pragma unroll
        for (int i = 0; i < WN / 16; ++i) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
          wmma::load_matrix_sync(a, sw + (wn + 16 * i) * LDS + kk, LDS);
#pragma unroll
          for (int j = 0; j < WT / 16; ++j) wmma::mma_sync(acc[i][j], a, b[j], acc[i][j]);
        }
      }
      __syncthreads();
    }
  }

  // Each fragment through the warp's 16x16 corner of the x tile ([t][n])
  // to rows of y, 16 outputs of a token at a time.
  float* so = reinterpret_cast<float*>(sx) + warp * 256;
  static_assert(kThreads / 32 * 256 * sizeof(float) <= BT * LDS * sizeof(__half), "staging fits the x tile");
  float* out = part ? part + int64_t(blockIdx.z) * T * m.col[m.n] + m.col[mat] : m.y[mat];
  const int64_t ld = part ? m.col[m.n] : m.ldy[mat];
#pragma unroll
  for (int i = 0; i < WN / 16; ++i)
#pragma unroll
    for (int j = 0; j < WT / 16; ++j) {
      wmma::store_matrix_sync(so, acc[i][j], 16, wmma::mem_col_major);
      __syncwarp();
#pragma unroll
      for (int e = lane; e < 256; e += 32) {
        const int64_t t = t0 + wt + 16 * j + e / 16, n = n0 + wn + 16 * i + e % 16;
        if (t < T && n < N) out[t * ld + n] = so[e];
      }
      __syncwarp();
    }
}

// y_j [t][n] = sum over the S splits of the partial sums, s in order.
__global__ void sum_splits_kernel(const float* __restrict__ part, int S, int64_t T, TileMats m) {
  pdl_wait();
  const int64_t cols = m.col[m.n];
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < T * cols; i += int64_t(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int z = 0; z < S; ++z) s += part[int64_t(z) * T * cols + i];
    const int64_t t = i / cols, c = i % cols;
    int j = 0;
    while (j + 1 < m.n && c >= m.col[j + 1]) ++j;
    m.y[j][t * m.ldy[j] + c - m.col[j]] = s;
  }
}

}  // namespace

TileMats tile_mats(const Tensor* const* dsts, int n, int rows) {
  if (n < 1 || n > kMaxMats) bad_operands("mul_mat", *dsts[0], "bad product group");
  TileMats m{};
  m.n = n;
  for (int j = 0; j < n; ++j) {
    const Tensor& W = *dsts[j]->src[0];
    m.w[j] = static_cast<const uint8_t*>(W.data);
    m.stride[j] = W.nb[1];
    m.rows[j] = W.ne[1];
    m.first_block[j + 1] = m.first_block[j] + blocks_for(W.ne[1], rows);
    m.col[j + 1] = m.col[j] + W.ne[1];
    m.y[j] = static_cast<float*>(dsts[j]->data);
    m.ldy[j] = int64_t(dsts[j]->nb[1] / 4);
  }
  return m;
}

void sum_splits(const float* part, int S, int64_t T, const TileMats& m, const OpCtx& c) {
  const unsigned g = unsigned(std::min<int64_t>(blocks_for(T * m.col[m.n], 256), int64_t(c.sm_count) * 8));
  launch_kernel(sum_splits_kernel, g, 256, 0, c.launch_stream(), part, S, T, m);
  WEIR_CUDA_CHECK_LAUNCH();
}

int tile_splits(int64_t blocks, int64_t slots, int64_t steps, int64_t T, int64_t cols, size_t weight_bytes,
                size_t part_bytes) {
  // Cost in bytes: the weights, stretched by the idle share of the last
  // wave, plus split K's partial sums written and read back.
  const double split_bytes = 2.0 * double(T) * double(cols) * sizeof(float);
  const int64_t most = std::min<int64_t>({kTileMaxSplits, steps, int64_t(part_bytes / (size_t(T) * size_t(cols) * 4))});
  int best = 1;
  double best_cost = 0;
  for (int64_t s = 1; s <= std::max<int64_t>(1, most); ++s) {
    const int64_t per = (steps + s - 1) / s, S = (steps + per - 1) / per;  // no empty split
    if (S != s) continue;
    const int64_t waves = (blocks * S + slots - 1) / slots;
    const double cost =
        double(weight_bytes) * double(waves * slots) / double(blocks * S) + (S > 1 ? S * split_bytes : 0);
    if (s == 1 || cost < best_cost) best = int(S), best_cost = cost;
  }
  return best;
}

void tile_mul_mat(const Tensor* const* dsts, int n, const OpCtx& c, const __half* xh, void* scratch,
                  size_t scratch_bytes) {
  const Tensor& dst = *dsts[0];
  const DType wt = dst.src[0]->dtype;
  const int64_t K = dst.src[0]->ne[0], T = dst.n_rows();
  const TileMats m = tile_mats(dsts, n, BN);
  const int64_t cols = m.col[n], have = m.first_block[n] * blocks_for(T, BT);
  // Split K until the GPU has about CudaOptions::tile_blocks (default 4)
  // blocks per SM, each split at least kTileMinSplitSteps K steps, as far as
  // scratch holds the partial sums.
  const int64_t want = int64_t(c.sm_count) * std::max(1, c.options().tile_blocks);
  const int64_t fits = int64_t(scratch_bytes / (size_t(T) * size_t(cols) * sizeof(float)));
  int64_t S = std::max<int64_t>(1, std::min<int64_t>({tile_max_splits(K, T, cols), (want + have - 1) / have, fits}));
  const int64_t per = (tile_k_steps(K) + S - 1) / S;
  S = (tile_k_steps(K) + per - 1) / per;  // no empty split
  float* part = S > 1 ? static_cast<float*>(scratch) : nullptr;
  const dim3 grid(unsigned(m.first_block[n]), blocks_for(T, BT), unsigned(S));
  bool ok = false;
  dispatch_dtype(wt, [&]<DType WT>() {
    if constexpr (WT != DType::F32 && WT != DType::F16 && WT != DType::BF16) {
      // Shared memory beyond the default 48 KB, on this device.
      allow_dynamic_smem(reinterpret_cast<const void*>(tile_kernel<WT>), int(Tile<WT>::kSmem));
      ok = true;
      launch_kernel(tile_kernel<WT>, grid, kThreads, Tile<WT>::kSmem, c.launch_stream(), m, K, xh, T, per * BK, part);
    }
  });
  if (!ok) bad_operands("mul_mat", dst, std::string("no GPU kernel for W type ") + dtype_name(wt));
  WEIR_CUDA_CHECK_LAUNCH();
  if (part) sum_splits(part, int(S), T, m, c);
}

}  // namespace weir::cuda
