// Decode products on 8-bit activations: x is quantized per 32 elements
// (scale d and d * sum of the quants, as llama.cpp's Q8_1), and each weight
// type's quants meet it in 4-way int8 dot products (dp4a), 16 elements per
// lane step: two 32-bit words of weight quants against two words of x for
// each of the one or two 32-element x blocks they touch. One warp per weight
// row, its lanes walking the row's blocks; the row's integer sums are scaled
// per x block in float and summed by the warp.
//
// Weight quants are read as 32-bit words (two 16-bit halves where a block
// size leaves them 2-byte aligned); offsets that the format stores apart
// (q4_0's -8, q5_0's -16, the K-quants' mins) are applied through the x
// block's sum: a unit covering n of a block's 32 elements takes n/32 of it,
// so the terms add up over the block's units.
#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/mul_mat_q8.h"

namespace weir::cuda {
namespace {

constexpr int kWarps = 4;

struct XBlock {  // 32 activations
  __half2 ds;    // d, d * sum(qs)
  int32_t qs[8];
};
static_assert(sizeof(XBlock) == 36);

// One warp per 32-element block of x: lane l quantizes element l.
__global__ void quantize_x_kernel(Rows x, int64_t K, int64_t T, XBlock* out) {
  pdl_wait();
  const int64_t nb = K / 32;
  const int64_t b = int64_t(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (b >= nb * T) return;
  const int lane = threadIdx.x & 31;
  const int64_t t = b / nb, kb = b % nb;
  const float v = reinterpret_cast<const float*>(x.row(t))[kb * 32 + lane];
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.0f;
  const int q = amax == 0.0f ? 0 : __float2int_rn(v / d);
  int sum = q;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  XBlock* blk = out + b;
  reinterpret_cast<int8_t*>(blk->qs)[lane] = int8_t(q);
  if (lane == 0) blk->ds = __floats2half2_rn(d, d * float(sum));
}

__device__ __forceinline__ uint32_t ld32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ uint32_t ld32_2(const uint8_t* p) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
  return uint32_t(h[0]) | uint32_t(h[1]) << 16;
}
__device__ __forceinline__ int dp4a(uint32_t a, int32_t b, int c) { return __dp4a(int(a), b, c); }
// Bits 0..3 of t to bit 4 of bytes 0..3.
__device__ __forceinline__ uint32_t spread4(uint32_t t) { return ((t * 0x00204081u) & 0x01010101u) << 4; }

// A unit = 16 weights of a block; dot(w block, unit, x blocks of this
// weight block) -> float contribution. XB: x blocks of 32 per weight block.
struct DotQ4_0 {
  static constexpr int QK = 32, BYTES = 18, UNITS = 2;
  __device__ static float dot(const uint8_t* b, int u, const XBlock* x) {
    const uint32_t w0 = ld32_2(b + 2 + 8 * u), w1 = ld32_2(b + 6 + 8 * u);
    int s = dp4a(w0 & 0x0F0F0F0Fu, x->qs[2 * u], 0);
    s = dp4a(w1 & 0x0F0F0F0Fu, x->qs[2 * u + 1], s);
    s = dp4a((w0 >> 4) & 0x0F0F0F0Fu, x->qs[2 * u + 4], s);
    s = dp4a((w1 >> 4) & 0x0F0F0F0Fu, x->qs[2 * u + 5], s);
    const float2 ds = __half22float2(x->ds);
    return h2f(b) * (ds.x * float(s) - 8.0f * 0.5f * ds.y);
  }
};
struct DotQ5_0 {
  static constexpr int QK = 32, BYTES = 22, UNITS = 2;
  __device__ static float dot(const uint8_t* b, int u, const XBlock* x) {
    const uint32_t qh = ld32_2(b + 2);
    int s = 0;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int w = 2 * u + k;  // word: elements 4w.. (low nibbles) and 16 + 4w.. (high)
      const uint32_t q = ld32_2(b + 6 + 4 * w);
      s = dp4a((q & 0x0F0F0F0Fu) | spread4((qh >> (4 * w)) & 15), x->qs[w], s);
      s = dp4a(((q >> 4) & 0x0F0F0F0Fu) | spread4((qh >> (16 + 4 * w)) & 15), x->qs[w + 4], s);
    }
    const float2 ds = __half22float2(x->ds);
    return h2f(b) * (ds.x * float(s) - 16.0f * 0.5f * ds.y);
  }
};
struct DotQ8_0 {
  static constexpr int QK = 32, BYTES = 34, UNITS = 2;
  __device__ static float dot(const uint8_t* b, int u, const XBlock* x) {
    int s = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) s = dp4a(ld32_2(b + 2 + 16 * u + 4 * k), x->qs[4 * u + k], s);
    return h2f(b) * __low2float(x->ds) * float(s);
  }
};
// q4_K / q5_K: unit u (0..15) takes qs words 2u, 2u+1: bytes 8u.. of the
// 32-byte group g = u / 4, whose low nibbles are sub-block 2g and high
// nibbles sub-block 2g + 1, at positions p = 8 (u % 4) .. p + 7.
template <bool Five>
struct DotQK45 {
  static constexpr int QK = 256, BYTES = Five ? 176 : 144, UNITS = 16;
  __device__ static float dot(const uint8_t* b, int u, const XBlock* x) {
    const int g = u / 4, p = 8 * (u % 4), jl = 2 * g, jh = 2 * g + 1;
    const uint8_t* qs = b + (Five ? 48 : 16) + 32 * g + p;
    const uint32_t w0 = ld32(qs), w1 = ld32(qs + 4);
    uint32_t l0 = w0 & 0x0F0F0F0Fu, l1 = w1 & 0x0F0F0F0Fu, h0 = (w0 >> 4) & 0x0F0F0F0Fu, h1 = (w1 >> 4) & 0x0F0F0F0Fu;
    if constexpr (Five) {
      const uint32_t q0 = ld32(b + 16 + p), q1 = ld32(b + 16 + p + 4);
      l0 |= ((q0 >> jl) & 0x01010101u) << 4;
      l1 |= ((q1 >> jl) & 0x01010101u) << 4;
      h0 |= ((q0 >> jh) & 0x01010101u) << 4;
      h1 |= ((q1 >> jh) & 0x01010101u) << 4;
    }
    const XBlock* xl = x + jl;
    const XBlock* xh = x + jh;
    const int sl = dp4a(l1, xl->qs[p / 4 + 1], dp4a(l0, xl->qs[p / 4], 0));
    const int sh = dp4a(h1, xh->qs[p / 4 + 1], dp4a(h0, xh->qs[p / 4], 0));
    int scl, mnl, sch, mnh;
    scale_min_k4(jl, b + 4, &scl, &mnl);
    scale_min_k4(jh, b + 4, &sch, &mnh);
    const float2 dl = __half22float2(xl->ds), dh = __half22float2(xh->ds);
    const float d = h2f(b), dmin = h2f(b + 2);
    return d * (float(scl) * dl.x * float(sl) + float(sch) * dh.x * float(sh)) -
           dmin * 0.25f * (float(mnl) * dl.y + float(mnh) * dh.y);
  }
};
// q6_K: unit u (0..15) takes ql bytes 8u..8u+7: half h = u / 8, l = 8 (u % 4)
// within a 32-row, s = (u / 4) % 2 for the low nibbles and s + 2 for the
// high ones; qh byte 32h + l holds the top two bits of all four s.
struct DotQ6K {
  static constexpr int QK = 256, BYTES = 210, UNITS = 16;
  __device__ static float dot(const uint8_t* b, int u, const XBlock* x) {
    const int h = u / 8, sa = (u / 4) % 2, sb = sa + 2, l = 8 * (u % 4);
    const uint8_t* ql = b + 8 * u;
    const uint8_t* qh = b + 128 + 32 * h + l;
    const uint32_t w0 = ld32_2(ql), w1 = ld32_2(ql + 4), q0 = ld32_2(qh), q1 = ld32_2(qh + 4);
    const int32_t a0 = __vsubss4(int((w0 & 0x0F0F0F0Fu) | (((q0 >> (2 * sa)) & 0x03030303u) << 4)), 0x20202020);
    const int32_t a1 = __vsubss4(int((w1 & 0x0F0F0F0Fu) | (((q1 >> (2 * sa)) & 0x03030303u) << 4)), 0x20202020);
    const int32_t c0 = __vsubss4(int(((w0 >> 4) & 0x0F0F0F0Fu) | (((q0 >> (2 * sb)) & 0x03030303u) << 4)), 0x20202020);
    const int32_t c1 = __vsubss4(int(((w1 >> 4) & 0x0F0F0F0Fu) | (((q1 >> (2 * sb)) & 0x03030303u) << 4)), 0x20202020);
    const XBlock* xa = x + 4 * h + sa;
    const XBlock* xb = x + 4 * h + sb;
    const int ia = __dp4a(a1, xa->qs[l / 4 + 1], __dp4a(a0, xa->qs[l / 4], 0));
    const int ib = __dp4a(c1, xb->qs[l / 4 + 1], __dp4a(c0, xb->qs[l / 4], 0));
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
    const float fa = float(sc[8 * h + 2 * sa + l / 16]), fb = float(sc[8 * h + 2 * sb + l / 16]);
    return h2f(b + 208) * (fa * __low2float(xa->ds) * float(ia) + fb * __low2float(xb->ds) * float(ib));
  }
};

// WPR warps per weight row (more for short matrices, so that enough warps
// are in flight to cover the memory latency); each thread walks its units
// kUnroll at a time, the loads of all of them issued before their products.
template <class D, int NT, int WPR>
__global__ void __launch_bounds__(32 * kWarps)
    q8_mat_vec_kernel(const uint8_t* __restrict__ W, size_t w_stride, int64_t K, int64_t N,
                      const XBlock* __restrict__ xq, float* __restrict__ y, int64_t ldy) {
  pdl_wait();
  constexpr int kRowsPerBlock = kWarps / WPR, kThreadsPerRow = 32 * WPR, kUnroll = 4;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + warp / WPR;
  const int sub = (warp % WPR) * 32 + lane;
  const bool live = row < N;
  const uint8_t* w = W + size_t(live ? row : 0) * w_stride;
  const int64_t nxb = K / 32;               // x blocks per token row
  const int64_t units = (K / D::QK) * D::UNITS;
  constexpr int XPB = D::QK / 32;           // x blocks per weight block
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  if (live) {
    for (int64_t i0 = sub; i0 < units; i0 += kThreadsPerRow * kUnroll) {
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int64_t i = i0 + int64_t(k) * kThreadsPerRow;
        if (i < units) {
          const int64_t blk = i / D::UNITS;
          const int u = int(i % D::UNITS);
          const uint8_t* b = w + blk * D::BYTES;
#pragma unroll
          for (int t = 0; t < NT; ++t) acc[t] += D::dot(b, u, xq + t * nxb + blk * XPB);
        }
      }
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = warp_sum(acc[t]);
  if constexpr (WPR > 1) {
    __shared__ float part[kWarps][NT];
    if (lane == 0)
#pragma unroll
      for (int t = 0; t < NT; ++t) part[warp][t] = acc[t];
    __syncthreads();
    if (warp % WPR != 0 || lane != 0 || !live) return;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < WPR; ++j) s += part[warp + j][t];
      y[t * ldy + row] = s;
    }
  } else {
    if (lane == 0 && live)
#pragma unroll
      for (int t = 0; t < NT; ++t) y[t * ldy + row] = acc[t];
  }
}

// Warps per row: enough warps in all to fill the GPU several times over,
// but at least 64 units of work per thread-row step... (1, 2 or 4).
int warps_per_row(int64_t N, int64_t units, int sm_count) {
  const int64_t want = int64_t(sm_count) * 48;  // warps in flight
  int wpr = 1;
  while (wpr < kWarps && N * wpr < want && units >= int64_t(64) * wpr) wpr *= 2;
  return wpr;
}

template <class D, int NT>
void launch_nt(const Tensor& dst, const OpCtx& c, const XBlock* xq) {
  const Tensor& W = *dst.src[0];
  const int64_t K = W.ne[0], N = W.ne[1];
  const auto* w = static_cast<const uint8_t*>(W.data);
  float* y = static_cast<float*>(dst.data);
  const int64_t ldy = int64_t(dst.nb[1] / 4);
  const int wpr = warps_per_row(N, (K / D::QK) * D::UNITS, c.sm_count);
  const unsigned grid = blocks_for(N, kWarps / wpr);
  if (wpr == 1)
    launch_kernel(q8_mat_vec_kernel<D, NT, 1>, grid, 32 * kWarps, 0, c.stream, w, W.nb[1], K, N, xq, y, ldy);
  else if (wpr == 2)
    launch_kernel(q8_mat_vec_kernel<D, NT, 2>, grid, 32 * kWarps, 0, c.stream, w, W.nb[1], K, N, xq, y, ldy);
  else
    launch_kernel(q8_mat_vec_kernel<D, NT, 4>, grid, 32 * kWarps, 0, c.stream, w, W.nb[1], K, N, xq, y, ldy);
  WEIR_CUDA_CHECK_LAUNCH();
}

template <class D>
void launch(const Tensor& dst, const OpCtx& c, const XBlock* xq) {
  switch (dst.n_rows()) {
    case 1: return launch_nt<D, 1>(dst, c, xq);
    case 2: return launch_nt<D, 2>(dst, c, xq);
    case 3: return launch_nt<D, 3>(dst, c, xq);
    case 4: return launch_nt<D, 4>(dst, c, xq);
    case 5: return launch_nt<D, 5>(dst, c, xq);
    case 6: return launch_nt<D, 6>(dst, c, xq);
    case 7: return launch_nt<D, 7>(dst, c, xq);
    case 8: return launch_nt<D, 8>(dst, c, xq);
    default: bad_operands("mul_mat", dst, "q8 decode kernels take at most 8 tokens");
  }
}

}  // namespace

bool has_q8_mat_vec(DType w) {
  switch (w) {
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return true;
    default: return false;
  }
}

size_t q8_act_bytes(int64_t K, int64_t T) { return size_t(K / 32) * size_t(T) * sizeof(XBlock); }

void q8_mat_vec(const Tensor& dst, const OpCtx& c) {
  const Tensor& W = *dst.src[0];
  const int64_t K = W.ne[0], T = dst.n_rows();
  if (q8_act_bytes(K, T) > c.scratch_bytes) bad_operands("mul_mat", dst, "scratch too small");
  auto* xq = static_cast<XBlock*>(c.scratch);
  if (!c.x_quantized) {
    const int64_t n_xb = (K / 32) * T;
    launch_kernel(quantize_x_kernel, blocks_for(n_xb, 8), 256, 0, c.stream, rows_of(*dst.src[1]), K, T, xq);
    WEIR_CUDA_CHECK_LAUNCH();
  }
  switch (W.dtype) {
    case DType::Q4_0: return launch<DotQ4_0>(dst, c, xq);
    case DType::Q5_0: return launch<DotQ5_0>(dst, c, xq);
    case DType::Q8_0: return launch<DotQ8_0>(dst, c, xq);
    case DType::Q4_K: return launch<DotQK45<false>>(dst, c, xq);
    case DType::Q5_K: return launch<DotQK45<true>>(dst, c, xq);
    case DType::Q6_K: return launch<DotQ6K>(dst, c, xq);
    default: bad_operands("mul_mat", dst, std::string("no q8 decode kernel for ") + dtype_name(W.dtype));
  }
}

}  // namespace weir::cuda
