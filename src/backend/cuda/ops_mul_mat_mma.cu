// mul_mat for small batches (5-64 tokens: uses_tile) of Q4_0, Q8_0, Q4_K,
// Q6_K and the lookup types (IQ4_NL, IQ4_XS, MXFP4): the MMA tile kernel.
// A block takes 256 weight rows and a tile of 16, 32 or 64 tokens (the
// smallest that holds T, so the tensor work grows with T); its eight warps
// take 32 rows each, all the tile's tokens. Per step of K,
// the quantized rows and the x tile come to shared memory by cp.async
// (double-buffered), the scale groups are decoded once into a table, and
// each warp turns its rows' bytes straight into mma.sync A fragments in
// registers (mma_frag.cuh): no fp16 copy of W is written anywhere. x is
// stored permuted so that a fragment's four k-slots are four consecutive
// elements of one scale group, fetched by ldmatrix.
//
// The WMMA tile kernel (ops_mul_mat_tile.cu) dequantizes into an fp16
// tile in shared memory and stays for the other types and shapes; it is
// also the reference the tests hold this kernel to.
#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/mma_frag.cuh"
#include "backend/cuda/mul_mat_tile.h"
#include "backend/cuda/tile_common.cuh"

namespace weir::cuda {
namespace {

constexpr int kRows = 256, kThreads = 256, kWarpRows = 32;
static_assert(kThreads / 32 * kWarpRows == kRows, "warps cover the rows");
// Tokens a block takes (TOK, a template parameter): 64 for batches, and
// the experts' tiles; 16 or 32 for a few tokens (a speculative step's
// verify), since every warp runs TOK / 8 mma n-tiles per A fragment
// whatever T is: at T = 16 a 64-token tile did 4x the tensor work needed
// and ran compute-bound (747 GB/s against decode's 2574).
constexpr int kTokensMax = 64;
constexpr int tile_tokens_for(int64_t T) { return T <= 16 ? 16 : T <= 32 ? 32 : 64; }

// Shared memory for W type T: two stages of (x tile, raw rows), then the
// scale table. Raw rows are copied from the 16-byte boundary below their
// first byte, so each has 16 bytes of room (none for the types whose rows
// are 16-byte aligned: q4_K's 16-token tile then takes 106 KB, so two
// blocks share an SM); x rows are padded by 8 halves
// so ldmatrix's eight 16-byte rows fall in different banks.
template <DType T, int TOK>
struct MmaTile {
  static constexpr int kTokens = TOK, kNT = TOK / 8;  // tokens, and mma n-tiles of 8, of a block
  static constexpr int BK = MmaW<T>::BK;
  static constexpr int kRawBytes = BK / Q<T>::QK * Q<T>::BYTES;
  static constexpr int kPitch = (kRawBytes + 15) / 16 * 16 + (MmaW<T>::kAligned ? 0 : 16);
  static constexpr int kChunks = kPitch / 16;
  static constexpr int kXPitch = BK + 8;  // halves
  static constexpr size_t kX = size_t(kTokens) * kXPitch * sizeof(__half);
  static constexpr size_t kRaw = size_t(kRows) * kPitch;
  static constexpr size_t kStage = kX + kRaw;
  static constexpr int kTablePitch = MmaW<T>::kGroups + 1;  // odd: rows in different banks
  static constexpr size_t kSmem = 2 * kStage + size_t(kRows) * kTablePitch * sizeof(MmaScale);
  static_assert(kChunks <= 16 && kRows == kThreads, "a half warp copies a row; a thread decodes a row's scales");
  static_assert(kSmem <= 227 * 1024, "fits an SM's shared memory");
  static_assert(TOK % 16 == 0 && TOK <= kTokensMax, "ldmatrix_x4 takes n-tiles in pairs");
};

// Starts copying step k0's raw bytes of rows n0.. and its x tile (token t
// of the tile: row x_row(t) of xh, none where negative) into one stage. A warp copies whole x rows
// and two weight rows at a time, 16 bytes a lane, so each instruction
// reads a few contiguous spans.
// x rows are x_ld halves apart (K rounded up to a step, zeros past K); a
// row's raw bytes end at K (a last step of fewer than BK elements: blocks
// of 32, the types mma_tail_ok takes).
template <DType T, int TOK, class XR>
__device__ __forceinline__ void load_stage(uint8_t* stage, const uint8_t* W, size_t w_stride, int64_t N, int64_t n0,
                                           const __half* xh, int64_t x_ld, int64_t K, const XR& x_row, int64_t k0) {
  using S = MmaTile<T, TOK>;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  constexpr int kXChunks = S::BK / 8, kPerInst = 32 / kXChunks;  // tokens a warp copies at once
  static_assert(TOK % (kThreads / 32 * kPerInst) == 0, "the warps copy whole x tiles");
  __half* xs = reinterpret_cast<__half*>(stage);
  {
    const int q = lane % kXChunks;
#pragma unroll
    for (int i = 0; i < TOK / (kThreads / 32 * kPerInst); ++i) {
      const int t = (i * (kThreads / 32) + warp) * kPerInst + lane / kXChunks;
      // Tokens past the tile's are left as they are: their columns are never stored.
      const int64_t row = x_row(t);
      if (row >= 0) cp_async16(xs + t * S::kXPitch + 8 * q, xh + row * x_ld + k0 + 8 * q);
    }
  }
  constexpr int kWarpRowsCopied = kRows / (kThreads / 32);
  const int q = lane & 15, r0 = warp * kWarpRowsCopied + (lane >> 4);
  // Aligned rows are kRawBytes / 16 whole chunks; others start up to 15
  // bytes into their first chunk and may end inside their last.
  if (q >= (MmaW<T>::kAligned ? S::kRawBytes / 16 : S::kChunks)) return;
  const int raw_bytes = int(std::min<int64_t>(S::kRawBytes, (K - k0) / Q<T>::QK * Q<T>::BYTES));
  uint8_t* raw = stage + S::kX + r0 * S::kPitch + 16 * q;
  const uint8_t* src = W + size_t(n0 + r0) * w_stride + size_t(k0 / Q<T>::QK) * Q<T>::BYTES;
  const int rows = int(std::min<int64_t>(N - n0 - r0, kWarpRowsCopied));
#pragma unroll 4
  for (int r = 0; r < rows; r += 2, raw += 2 * S::kPitch, src += 2 * w_stride) {
    if constexpr (MmaW<T>::kAligned) {
      cp_async16(raw, src + 16 * q);
    } else {
      const int delta = int(uintptr_t(src) & 15), left = delta + raw_bytes - 16 * q;  // bytes from this chunk on
      if (left >= 16)
        cp_async16(raw, src - delta + 16 * q);
      else if (left > 0)
        cp_async16(raw, src - delta + 16 * q, left);
    }
  }
}

// The tile's products over K range [kb, ke): acc (as the mma fragments
// hold them: rows warp * 32 + 16 mt + g + 8 (e >> 1), tokens 8 nt + 2 c +
// (e & 1)) = W rows n0.. times the tile's x rows (x_row).
template <DType WT, int TOK, class XR>
__device__ __forceinline__ void mma_tile_body(const uint8_t* __restrict__ W, size_t w_stride, int64_t N, int64_t n0,
                                              const __half* __restrict__ xh, int64_t x_ld, int64_t K, const XR& x_row,
                                              int64_t kb, int64_t ke, float (&acc)[2][TOK / 8][4]) {
  using S = MmaTile<WT, TOK>;
  constexpr int kNT = S::kNT;
  using F = MmaW<WT>;
  extern __shared__ __align__(128) uint8_t smem[];
  MmaScale* table = reinterpret_cast<MmaScale*>(smem + 2 * S::kStage);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;

  // ldmatrix rows: lanes 0-7 and 8-15 the first 8 tokens of a pair of
  // n-tiles at k and k + 8, lanes 16-31 the next 8.
  const int x_row8 = (lane & 7) + 8 * (lane >> 4), x_col = 8 * ((lane >> 3) & 1);

  load_stage<WT, TOK>(smem, W, w_stride, N, n0, xh, x_ld, K, x_row, kb);
  cp_async_commit();
  for (int64_t k0 = kb, step = 0; k0 < ke; k0 += S::BK, ++step) {
    uint8_t* stage = smem + (step & 1) * S::kStage;
    cp_async_wait<0>();
    __syncthreads();  // this stage landed; every warp is done with the last
    if (k0 + S::BK < ke) {
      load_stage<WT, TOK>(smem + ((step + 1) & 1) * S::kStage, W, w_stride, N, n0, xh, x_ld, K, x_row, k0 + S::BK);
      cp_async_commit();
    }
    const uint8_t* raw = stage + S::kX;
    const size_t off = size_t(k0 / Q<WT>::QK) * Q<WT>::BYTES;
    auto row_bytes = [&](int r) {
      return raw + r * S::kPitch + int(uintptr_t(W + size_t(n0 + r) * w_stride + off) & 15);
    };
    {  // thread tid decodes row tid's scale groups; groups past K (a last
       // step's) scale by 0, so their bytes (never loaded) give zeros
      const bool live = n0 + tid < N;
      const int groups = int(std::min<int64_t>(F::kGroups, (K - k0) / (S::BK / F::kGroups)));
      const uint8_t* rb = row_bytes(tid);
#pragma unroll
      for (int grp = 0; grp < F::kGroups; ++grp)
        table[tid * S::kTablePitch + grp] = live && grp < groups ? F::scale(rb, grp) : MmaScale{0, 0};
    }
    __syncthreads();

    const unsigned xs = unsigned(__cvta_generic_to_shared(stage)) + unsigned((x_row8 * S::kXPitch + x_col) * 2);
    const uint8_t* rows[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) rows[mt][h] = row_bytes(warp * kWarpRows + 16 * mt + 8 * h + g);
#pragma unroll
    for (int ch = 0; ch < S::BK / 128; ++ch) {
      typename F::Regs regs[2][2];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) regs[mt][h] = F::load(rows[mt][h], ch, c);
#pragma unroll
      for (int nib = 0; nib < 2; ++nib) {
        MmaScale sc[2][2];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            sc[mt][h] = table[(warp * kWarpRows + 16 * mt + 8 * h + g) * S::kTablePitch + F::group(ch, nib, c)];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int j = 8 * ch + 4 * nib + i;
          uint32_t b[kNT / 2][4];
#pragma unroll
          for (int p = 0; p < kNT / 2; ++p) ldmatrix_x4(b[p], xs + unsigned((16 * p * S::kXPitch + 16 * j) * 2));
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
            const uint2 f0 = F::frag(regs[mt][0], nib, i, c), f1 = F::frag(regs[mt][1], nib, i, c);
            const uint32_t bias = F::bias(nib, c);
            const uint32_t a[4] = {mma_dequant(f0.x, bias, sc[mt][0]), mma_dequant(f1.x, bias, sc[mt][1]),
                                   mma_dequant(f0.y, bias, sc[mt][0]), mma_dequant(f1.y, bias, sc[mt][1])};
#pragma unroll
            for (int p = 0; p < kNT / 2; ++p) {
              mma_16816(acc[mt][2 * p], a, b[p][0], b[p][1]);
              mma_16816(acc[mt][2 * p + 1], a, b[p][2], b[p][3]);
            }
          }
        }
      }
    }
  }
}

// Each result a thread holds after mma_tile_body: f(row within the block's
// rows, token within the tile, value).
template <int kNT, class F>
__device__ __forceinline__ void for_each_result(const float (&acc)[2][kNT][4], F&& f) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        f(warp * kWarpRows + 16 * mt + g + 8 * (e >> 1), 8 * nt + 2 * c + (e & 1), acc[mt][nt][e]);
}

// y_j [T][N_j] (or split blockIdx.z's partial sums) = W_j [N_j][K] x [T][K]^T
// over K range [blockIdx.z * k_split, +k_split); xh: x in fp16, permuted
// (mma_x_source), rows of K.
// Small tiles hold few accumulators: two blocks an SM where shared memory
// lets them (more warps to hide the loads' and the mma's latency).
template <DType WT, int TOK>
__global__ void __launch_bounds__(kThreads, TOK <= 16 ? 2 : 1)
    mma_tile_kernel(TileMats m, int64_t K, const __half* __restrict__ xh, int64_t T_, int64_t k_split,
                    float* __restrict__ part) {
  pdl_wait();
  const int mat = tile_mat_of(m);
  const int64_t N = m.rows[mat];
  const int64_t n0 = (int64_t(blockIdx.x) - m.first_block[mat]) * kRows, t0 = int64_t(blockIdx.y) * TOK;
  const int64_t kb = int64_t(blockIdx.z) * k_split, ke = std::min(K, kb + k_split);
  float acc[2][TOK / 8][4];
  const auto x_row = [&](int t) { return t0 + t < T_ ? t0 + t : int64_t(-1); };
  mma_tile_body<WT, TOK>(m.w[mat], m.stride[mat], N, n0, xh, K, K, x_row, kb, ke, acc);
  float* out = part ? part + int64_t(blockIdx.z) * T_ * m.col[m.n] + m.col[mat] : m.y[mat];
  const int64_t ld = part ? m.col[m.n] : m.ldy[mat];
  for_each_result(acc, [&](int r, int t, float v) {
    if (n0 + r < N && t0 + t < T_) out[(t0 + t) * ld + n0 + r] = v;
  });
}

// The experts' products (moe_ops.h): block (row block, tile blockIdx.y)
// takes its tile's expert rows and up to 64 pairs (x rows gathered, results
// scattered to the pairs' rows of y [N, pairs]); tiles past the count do
// nothing; a tile of expert -1 (ids out of range) stores NaN.
template <DType WT>
__global__ void __launch_bounds__(kThreads, 1) mma_expert_kernel(MmaExperts a) {
  pdl_wait();
  if (int(blockIdx.y) >= *a.count) return;
  const int4 tile = a.tile[blockIdx.y];
  constexpr int kTokens = kTokensMax;
  __shared__ int64_t pair[kTokens], xrow[kTokens];
  if (threadIdx.x < kTokens) {
    const int64_t p = int(threadIdx.x) < tile.z ? a.order[tile.y + threadIdx.x] : -1;
    pair[threadIdx.x] = p;
    xrow[threadIdx.x] = p < 0 ? -1 : a.x_per_token == 1 ? p / a.k : p;
  }
  __syncthreads();
  const int64_t n0 = int64_t(blockIdx.x) * kRows;
  float acc[2][kTokens / 8][4] = {};
  if (tile.x >= 0) {
    const auto x_row = [&](int t) { return xrow[t]; };
    mma_tile_body<WT, kTokens>(a.w + size_t(tile.x) * a.expert_stride, a.row_stride, a.N, n0, a.xh, mma_x_ld(a.K),
                               a.K, x_row, 0, a.K, acc);
  }
  for_each_result(acc, [&](int r, int t, float v) {
    if (n0 + r < a.N && t < tile.z) a.y[pair[t] * a.N + n0 + r] = tile.x >= 0 ? v : __int_as_float(0x7fc00000);
  });
}

// x rows to fp16 in the order mma_x_source gives, within groups of 256;
// rows of ld = mma_x_ld(K) halves, zeros past K.
__global__ void convert_x_permuted_kernel(Rows x, int64_t K, int64_t ld, int64_t T, __half* out) {
  pdl_wait();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < T * ld; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / ld, k = i % ld, k_src = k / 256 * 256 + mma_x_source(int(k % 256));
    const float v = k_src < K ? reinterpret_cast<const float*>(x.row(t))[k_src] : 0.0f;
    out[i] = __float2half_rn(fminf(fmaxf(v, -65504.0f), 65504.0f));
  }
}

template <DType WT, int TOK>
void launch(const TileMats& m, int64_t K, const __half* xh, int64_t T, const OpCtx& c, void* scratch,
            size_t scratch_bytes) {
  using S = MmaTile<WT, TOK>;
  allow_dynamic_smem(reinterpret_cast<const void*>(mma_tile_kernel<WT, TOK>), int(S::kSmem));  // on this device
  static const int per_sm = [] {  // shared memory beyond the default 48 KB
    int n = 0;
    WEIR_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, mma_tile_kernel<WT, TOK>, kThreads, S::kSmem));
    return std::max(1, n);
  }();
  size_t weight_bytes = 0;
  for (int j = 0; j < m.n; ++j) weight_bytes += size_t(m.rows[j]) * m.stride[j];
  const int64_t blocks = m.first_block[m.n] * blocks_for(T, TOK), steps = (K + S::BK - 1) / S::BK;
  const int splits =
      tile_splits(blocks, int64_t(c.sm_count) * per_sm, steps, T, m.col[m.n], weight_bytes, scratch_bytes);
  const int64_t per = (steps + splits - 1) / splits;
  float* part = splits > 1 ? static_cast<float*>(scratch) : nullptr;
  const dim3 grid(unsigned(m.first_block[m.n]), blocks_for(T, TOK), unsigned(splits));
  launch_kernel(mma_tile_kernel<WT, TOK>, grid, kThreads, S::kSmem, c.launch_stream(), m, K, xh, T, per * S::BK, part);
  WEIR_CUDA_CHECK_LAUNCH();
  if (part) sum_splits(part, splits, T, m, c);
}

}  // namespace

size_t mma_convert_x(const Tensor& x, int64_t K, int64_t T, const OpCtx& c) {
  const int64_t ld = mma_x_ld(K);
  const unsigned grid = unsigned(std::min<int64_t>(blocks_for(T * ld, 256), int64_t(c.sm_count) * 16));
  launch_kernel(convert_x_permuted_kernel, grid, 256, 0, c.launch_stream(), rows_of(x), K, ld, T,
                static_cast<__half*>(c.scratch));
  WEIR_CUDA_CHECK_LAUNCH();
  return (size_t(T * ld * 2) + 255) / 256 * 256;
}

void mma_expert_mul_mat(const MmaExperts& a, DType wt, unsigned max_tiles, const OpCtx& c) {
  bool ok = false;
  dispatch_dtype(wt, [&]<DType WT>() {
    if constexpr (MmaW<WT>::kHas) {
      ok = true;
      using S = MmaTile<WT, kTokensMax>;
      allow_dynamic_smem(reinterpret_cast<const void*>(mma_expert_kernel<WT>), int(S::kSmem));
      const dim3 grid(blocks_for(a.N, kRows), max_tiles);
      launch_kernel(mma_expert_kernel<WT>, grid, kThreads, S::kSmem, c.launch_stream(), a);
      WEIR_CUDA_CHECK_LAUNCH();
    }
  });
  if (!ok) throw Error(std::string("cuda mul_mat_id: no MMA tile kernel for W type ") + dtype_name(wt));
}

void mma_tile_mul_mat(const Tensor* const* dsts, int n, const OpCtx& c, const __half* xh, void* scratch,
                      size_t scratch_bytes) {
  const Tensor& dst = *dsts[0];
  const DType wt = dst.src[0]->dtype;
  const TileMats m = tile_mats(dsts, n, kRows);
  bool ok = false;
  dispatch_dtype(wt, [&]<DType WT>() {
    if constexpr (MmaW<WT>::kHas) {
      ok = true;
      const int64_t T = dst.n_rows();
      switch (tile_tokens_for(T)) {
        case 16: launch<WT, 16>(m, dst.src[0]->ne[0], xh, T, c, scratch, scratch_bytes); break;
        case 32: launch<WT, 32>(m, dst.src[0]->ne[0], xh, T, c, scratch, scratch_bytes); break;
        default: launch<WT, kTokensMax>(m, dst.src[0]->ne[0], xh, T, c, scratch, scratch_bytes);
      }
    }
  });
  if (!ok) bad_operands("mul_mat", dst, std::string("no MMA tile kernel for W type ") + dtype_name(wt));
}

}  // namespace weir::cuda
