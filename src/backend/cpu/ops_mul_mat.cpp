// mul_mat: y [N, T] = W [K, N] x [K, T], W of any dequantizable dtype, x and
// y F32. y row t holds the N outputs of token t: y[t][n] = dot(W row n, x row t).
//
// Two kernels, both splitting N across threads and dequantizing each W row
// once into per-thread scratch (ops_dequant.cpp, bit-identical to
// dequantize_row):
//
//  - few tokens (T < kPanelMinT, decode): "dot" form. Chunks of 4..16 W rows
//    are dequantized row-major (L1) and dotted with every token: dot_tile
//    (ops_simd.h) keeps one vector accumulator per (row, token) over k and
//    reduces it at the end. Memory bound: it streams the weights once.
//  - many tokens (prefill): "panel" form, a register-blocked GEMM. A chunk
//    of W rows (about 256 KiB, L2) is dequantized and transposed into panels
//    of P = 2 vectors of rows, k-major ([K][P]); the micro-kernel keeps
//    NR x 2 vector accumulators (AVX-512: P = 32 rows, NR = 14 tokens, 28
//    zmm) and per k does 2 loads + NR broadcasts for 2*NR FMAs, writing
//    contiguous runs of y row t. x is read in place, or packed k-major once
//    per call when a thread has many W rows (kPackMinRows).
//
// Both are compiled for AVX-512, AVX2 and baseline x86-64 (ops_simd.h), the
// panel micro-kernel with intrinsics for the first two, and chosen at run
// time. Accumulation is float with FMAs: the dot form sums 16 (8, 4)
// lane-wise partial sums, the panel form one chain in k order, so the same
// token can differ in the last bits between a decode step and a prefill.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/amx_product.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/ops_common.h"
#include "backend/cpu/ops_dequant.h"
#include "backend/cpu/ops_mul_mat_q.h"
#include "backend/cpu/ops_simd.h"
#include "backend/cpu/numa_plan.h"
#include "core/error.h"

namespace weir::cpu {
namespace {

using namespace simd;

constexpr int64_t kPanelMinT = 8;       // from this many tokens on, the panel form
constexpr int64_t kPackMinRows = 1024;  // panel form: pack x when a thread has this many W rows

// Rows [begin, end) of N for thread ith of nth; boundaries are multiples of
// align (the last one is N).
void split_rows(int64_t n, int64_t align, int ith, int nth, int64_t* begin, int64_t* end) {
  const int64_t units = (n + align - 1) / align;
  const int64_t u0 = units * ith / nth, u1 = units * (ith + 1) / nth;
  *begin = std::min(n, u0 * align);
  *end = std::min(n, u1 * align);
}

// Runs fn(n0, n1) over this thread's share of the N weight rows, in
// multiples of kNumaRowAlign (a multiple of every kernel's row tile). One
// NUMA node: chunks from the shared counter (about per_thread per thread;
// decode asks for 16, so a thread preempted mid-chunk holds up little),
// so a preempted thread takes fewer. Several nodes: the rows placed on this
// thread's node (numa_plan.h), split evenly among the node's threads.
template <class F>
void for_each_weight_rows(const OpContext& c, int64_t N, int per_thread, F&& fn) {
  if (c.numa) {
    const int g = c.numa->group_of_thread[size_t(c.ith)];
    const NumaGroup& grp = c.numa->groups[size_t(g)];
    int64_t b, e;
    c.numa->rows(g, N, kNumaRowAlign, &b, &e);
    int64_t n0, n1;
    split_rows(e - b, kNumaRowAlign, c.ith - grp.first_thread, grp.n_threads, &n0, &n1);
    if (n0 < n1) fn(b + n0, b + n1);
    return;
  }
  for_each_chunk(c, N, chunk_size(c, N, kNumaRowAlign, per_thread), fn);
}

float* aligned_scratch(Scratch* s, size_t n) {
  float* p = s->floats(n + 16);
  const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t(63);
  return reinterpret_cast<float*>(a);
}

const float* x_row(const Tensor& t, int64_t r) { return flat_row<const float>(t, r); }

// ---------------------------------------------------------------------------
// Dot form.

// dot_tile (ops_simd.h) computes MR rows x NR tokens of dot products.

// Rows [0, R) of a dequantized chunk (ldw floats apart) times all T tokens;
// y row t of the chunk starts at y0 + t * ldy.
template <class V>
WEIR_INLINE void dot_chunk(const float* w, size_t ldw, int64_t R, const Tensor& x, int64_t T, int64_t K,
                           float* y0, size_t ldy) {
  int64_t t0 = 0;
  for (; t0 < T;) {
    const int64_t nt = T - t0;
    const float* xr[4];
    float* yr[4];
    const int nr = nt >= 4 ? 4 : int(nt);
    for (int c = 0; c < nr; ++c) {
      xr[c] = x_row(x, t0 + c);
      yr[c] = y0 + (t0 + c) * ldy;
    }
    int64_t r = 0;
    if (nr == 1) {
      for (; r + 8 <= R; r += 8) {
        float* yo[1] = {yr[0] + r};
        dot_tile<V, 8, 1>(w + r * ldw, ldw, xr, K, yo);
      }
    }
    for (; r + 4 <= R; r += 4) {
      float* yo[4];
      for (int c = 0; c < nr; ++c) yo[c] = yr[c] + r;
      switch (nr) {
        case 4: dot_tile<V, 4, 4>(w + r * ldw, ldw, xr, K, yo); break;
        case 3: dot_tile<V, 4, 3>(w + r * ldw, ldw, xr, K, yo); break;
        case 2: dot_tile<V, 4, 2>(w + r * ldw, ldw, xr, K, yo); break;
        default: dot_tile<V, 4, 1>(w + r * ldw, ldw, xr, K, yo); break;
      }
    }
    for (; r < R; ++r) {
      float* yo[4];
      for (int c = 0; c < nr; ++c) yo[c] = yr[c] + r;
      switch (nr) {
        case 4: dot_tile<V, 1, 4>(w + r * ldw, ldw, xr, K, yo); break;
        case 3: dot_tile<V, 1, 3>(w + r * ldw, ldw, xr, K, yo); break;
        case 2: dot_tile<V, 1, 2>(w + r * ldw, ldw, xr, K, yo); break;
        default: dot_tile<V, 1, 1>(w + r * ldw, ldw, xr, K, yo); break;
      }
    }
    t0 += nr;
  }
}

struct MatMulArgs {
  const Tensor* w;
  const Tensor* x;
  const Tensor* y;
  int64_t K, N, T;
  int64_t n0, n1;  // this thread's rows of W
  Scratch* scratch;
};

template <class V>
WEIR_INLINE void mm_dot_impl(const MatMulArgs& a) {
  const int64_t K = a.K;
  const Tensor& W = *a.w;
  const auto* wbase = static_cast<const uint8_t*>(W.data);
  float* y0 = static_cast<float*>(a.y->data);
  const size_t ldy = a.y->nb[1] / sizeof(float);
  // Plain f32 weights with float-aligned rows are read in place.
  if (W.dtype == DType::F32 && W.nb[1] % sizeof(float) == 0 &&
      reinterpret_cast<uintptr_t>(W.data) % sizeof(float) == 0) {
    dot_chunk<V>(reinterpret_cast<const float*>(wbase + a.n0 * W.nb[1]), W.nb[1] / sizeof(float),
                 a.n1 - a.n0, *a.x, a.T, K, y0 + a.n0, ldy);
    return;
  }
  // Chunks of rows small enough to stay in L1/L2 while they are used.
  const int64_t chunk = std::clamp<int64_t>(int64_t(16384 / K) / 4 * 4, 4, 16);
  const size_t ldw = size_t((K + 15) / 16 * 16);
  float* buf = aligned_scratch(a.scratch, size_t(chunk) * ldw);
  for (int64_t n = a.n0; n < a.n1; n += chunk) {
    const int64_t R = std::min(chunk, a.n1 - n);
    dequantize_rows(W.dtype, wbase + n * W.nb[1], W.nb[1], R, K, buf, ldw);
    dot_chunk<V>(buf, ldw, R, *a.x, a.T, K, y0 + n, ldy);
  }
}

// ---------------------------------------------------------------------------
// Panel form.

template <class V>
struct PanelShape {
  static constexpr int L = kLanes<V>;
  static constexpr int P = 2 * L;                 // W rows per panel
  static constexpr int NR = L == 16 ? 14 : 6;     // tokens per micro-tile
};

// acc over one panel (wp: [K][P]) and NC <= NR tokens: x element k of token
// c is xr[c][k] (XS = 1: x rows in place) or xr[0][k * XS + c] (XS = NR:
// packed k-major, one pointer).
// Writes rows [0, rows) of the panel for each token c to yr[c].
template <class V, int NC, int XS>
WEIR_INLINE void panel_tile(const float* __restrict wp, const float* const* xr, int64_t K,
                            float* const* yr, int rows) {
  constexpr int L = PanelShape<V>::L;
  constexpr int P = PanelShape<V>::P;
  V acc[NC][2];
#pragma GCC unroll 16
  for (int c = 0; c < NC; ++c) acc[c][0] = acc[c][1] = V{};
  for (int64_t k = 0; k < K; ++k) {
    const V w0 = loadu<V>(wp + k * P);
    const V w1 = loadu<V>(wp + k * P + L);
#pragma GCC unroll 16
    for (int c = 0; c < NC; ++c) {
      const V xb = splat<V>(XS == 1 ? xr[c][k] : xr[0][k * XS + c]);
      acc[c][0] += w0 * xb;
      acc[c][1] += w1 * xb;
    }
  }
  if (rows == P) {
#pragma GCC unroll 16
    for (int c = 0; c < NC; ++c) {
      storeu<V>(yr[c], acc[c][0]);
      storeu<V>(yr[c] + L, acc[c][1]);
    }
  } else {
    for (int c = 0; c < NC; ++c) {
      float tmp[P];
      storeu<V>(tmp, acc[c][0]);
      storeu<V>(tmp + L, acc[c][1]);
      std::memcpy(yr[c], tmp, size_t(rows) * sizeof(float));
    }
  }
}

// The same micro-kernel written with intrinsics for AVX-512 and AVX2: GCC 12
// turns the generic version's broadcasts into masked lane inserts, while
// _mm512_broadcastss_ps(_mm_load_ss(p)) becomes one vbroadcastss from memory
// (a load-port uop). Called, not inlined (a call per K-long tile is free).
template <int NC, int XS>
WEIR_TARGET_AVX512 void panel_tile_avx512(const float* __restrict wp, const float* const* xr,
                                          int64_t K, float* const* yr, int rows) {
  __m512 acc[NC][2];
#pragma GCC unroll 16
  for (int c = 0; c < NC; ++c) acc[c][0] = acc[c][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const __m512 w0 = _mm512_load_ps(wp + k * 32);
    const __m512 w1 = _mm512_load_ps(wp + k * 32 + 16);
#pragma GCC unroll 16
    for (int c = 0; c < NC; ++c) {
      const __m512 xb = _mm512_broadcastss_ps(_mm_load_ss(XS == 1 ? xr[c] + k : xr[0] + k * XS + c));
      acc[c][0] = _mm512_fmadd_ps(w0, xb, acc[c][0]);
      acc[c][1] = _mm512_fmadd_ps(w1, xb, acc[c][1]);
    }
  }
  if (rows == 32) {
#pragma GCC unroll 16
    for (int c = 0; c < NC; ++c) {
      _mm512_storeu_ps(yr[c], acc[c][0]);
      _mm512_storeu_ps(yr[c] + 16, acc[c][1]);
    }
  } else {
    const __mmask16 m0 = __mmask16(rows >= 16 ? 0xFFFF : (1u << rows) - 1);
    const __mmask16 m1 = __mmask16(rows <= 16 ? 0 : (1u << (rows - 16)) - 1);
    for (int c = 0; c < NC; ++c) {
      _mm512_mask_storeu_ps(yr[c], m0, acc[c][0]);
      _mm512_mask_storeu_ps(yr[c] + 16, m1, acc[c][1]);
    }
  }
}

template <int NC, int XS>
WEIR_TARGET_AVX2 void panel_tile_avx2(const float* __restrict wp, const float* const* xr,
                                      int64_t K, float* const* yr, int rows) {
  __m256 acc[NC][2];
#pragma GCC unroll 16
  for (int c = 0; c < NC; ++c) acc[c][0] = acc[c][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const __m256 w0 = _mm256_load_ps(wp + k * 16);
    const __m256 w1 = _mm256_load_ps(wp + k * 16 + 8);
#pragma GCC unroll 16
    for (int c = 0; c < NC; ++c) {
      const __m256 xb = _mm256_broadcast_ss(XS == 1 ? xr[c] + k : xr[0] + k * XS + c);
      acc[c][0] = _mm256_fmadd_ps(w0, xb, acc[c][0]);
      acc[c][1] = _mm256_fmadd_ps(w1, xb, acc[c][1]);
    }
  }
  for (int c = 0; c < NC; ++c) {
    alignas(32) float tmp[16];
    _mm256_store_ps(tmp, acc[c][0]);
    _mm256_store_ps(tmp + 8, acc[c][1]);
    std::memcpy(yr[c], tmp, size_t(rows) * sizeof(float));
  }
}

template <class V, int XS, int NC = PanelShape<V>::NR>
WEIR_INLINE void panel_tile_n(int nc, const float* wp, const float* const* xr, int64_t K,
                              float* const* yr, int rows) {
  if constexpr (NC >= 1) {
    if (nc == NC) {
      if constexpr (kLanes<V> == 16)
        return panel_tile_avx512<NC, XS>(wp, xr, K, yr, rows);
      else if constexpr (kLanes<V> == 8)
        return panel_tile_avx2<NC, XS>(wp, xr, K, yr, rows);
      else
        return panel_tile<V, NC, XS>(wp, xr, K, yr, rows);
    }
    return panel_tile_n<V, XS, NC - 1>(nc, wp, xr, K, yr, rows);
  }
}

// dst[k * P + r] = src[r * K + k] for r < P, k < K, in 8 x 8 blocks.
template <int P>
WEIR_INLINE void transpose_panel(const float* __restrict src, int64_t K, float* __restrict dst) {
  int64_t k0 = 0;
  for (; k0 + 8 <= K; k0 += 8)
    for (int r0 = 0; r0 < P; r0 += 8)
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) dst[(k0 + i) * P + r0 + j] = src[(r0 + j) * K + k0 + i];
  for (; k0 < K; ++k0)
    for (int r = 0; r < P; ++r) dst[k0 * P + r] = src[r * K + k0];
}

template <class V>
WEIR_INLINE void mm_panel_impl(const MatMulArgs& a) {
  constexpr int P = PanelShape<V>::P;
  constexpr int NR = PanelShape<V>::NR;
  const int64_t K = a.K;
  const Tensor& W = *a.w;
  const auto* wbase = static_cast<const uint8_t*>(W.data);
  float* y0 = static_cast<float*>(a.y->data);
  const size_t ldy = a.y->nb[1] / sizeof(float);

  // Packed rows per chunk: about 256 KiB of panels (stays in L2).
  const int64_t chunk = std::clamp<int64_t>(int64_t(65536 / K) / P * P, P, 8 * P);
  const size_t panels_n = size_t(chunk) * size_t(K);
  const size_t stage_n = size_t(P) * size_t(K);
  // With many rows per thread, x is first packed k-major in blocks of NR
  // tokens (contiguous broadcasts, a few % faster); with few, packing every
  // token would cost more than it saves and x rows are read in place.
  const bool pack = a.n1 - a.n0 >= kPackMinRows;
  const int64_t nblk = (a.T + NR - 1) / NR;
  const size_t xpack_n = pack ? size_t(nblk) * NR * size_t(K) : 0;
  float* panels = aligned_scratch(a.scratch, panels_n + stage_n + xpack_n);
  float* stage = panels + panels_n;  // P dequantized rows, row-major
  float* xpack = stage + stage_n;    // blocks of NR tokens, each [K][NR]
  if (pack) {
    for (int64_t b = 0; b < nblk; ++b) {
      const int nc = int(std::min<int64_t>(NR, a.T - b * NR));
      float* xb = xpack + size_t(b) * NR * size_t(K);
      for (int c = 0; c < nc; ++c) {
        const float* xs = x_row(*a.x, b * NR + c);
        for (int64_t k = 0; k < K; ++k) xb[k * NR + c] = xs[k];
      }
    }
  }

  for (int64_t n = a.n0; n < a.n1; n += chunk) {
    const int64_t R = std::min(chunk, a.n1 - n);
    const int64_t np = (R + P - 1) / P;
    // Dequantize P rows at a time and transpose them into a [K][P] panel;
    // rows past R are zero.
    for (int64_t p = 0; p < np; ++p) {
      const int64_t rows = std::min<int64_t>(P, R - p * P);
      dequantize_rows(W.dtype, wbase + (n + p * P) * W.nb[1], W.nb[1], rows, K, stage, size_t(K));
      if (rows < P) std::memset(stage + rows * K, 0, size_t(P - rows) * size_t(K) * sizeof(float));
      transpose_panel<P>(stage, K, panels + size_t(p) * size_t(K) * P);
    }
    // NR tokens stay in L1 while they meet every panel of the chunk.
    for (int64_t t0 = 0; t0 < a.T; t0 += NR) {
      const int nc = int(std::min<int64_t>(NR, a.T - t0));
      const float* xr[NR];
      for (int c = 0; c < nc; ++c)
        xr[c] = pack ? xpack + size_t(t0) * size_t(K) + c : x_row(*a.x, t0 + c);
      for (int64_t p = 0; p < np; ++p) {
        const int rows = int(std::min<int64_t>(P, R - p * P));
        float* yr[NR];
        for (int c = 0; c < nc; ++c) yr[c] = y0 + (t0 + c) * ldy + n + p * P;
        const float* wp = panels + size_t(p) * size_t(K) * P;
        if (pack)
          panel_tile_n<V, NR>(nc, wp, xr, K, yr, rows);
        else
          panel_tile_n<V, 1>(nc, wp, xr, K, yr, rows);
      }
    }
  }
}

WEIR_DISPATCH(mm_dot, (const MatMulArgs& a), (a))
WEIR_DISPATCH(mm_panel, (const MatMulArgs& a), (a))

// Empty when the operands are usable.
std::string check_mul_mat(const Tensor& dst) {
  const Tensor* w = dst.src[0];
  const Tensor* x = dst.src[1];
  if (!w || !x) return "mul_mat: " + dst.name + ": missing operands";
  auto where = [&] { return "mul_mat " + dst.name + " (W " + shape_str(*w) + ", x " + shape_str(*x) + ")"; };
  const DTypeTraits* tr = dtype_traits(uint32_t(w->dtype));
  if (!tr || !tr->dequantizable)
    return where() + ": W dtype " + (tr ? tr->name : "?") + " cannot be dequantized";
  if (x->dtype != DType::F32 || dst.dtype != DType::F32 || x->nb[0] != sizeof(float) ||
      dst.nb[0] != sizeof(float))
    return where() + ": x and y must be F32 with contiguous rows";
  if (w->ne[0] != x->ne[0] || dst.ne[0] != w->ne[1] || dst.n_rows() != x->n_rows() ||
      w->ne[2] * w->ne[3] != 1 || dst.ne[2] * dst.ne[3] != 1)
    return where() + ": shapes do not match";
  if (w->ne[0] % tr->block_size != 0) return where() + ": K is not a multiple of the block size";
  return {};
}

}  // namespace

void op_mul_mat(const Tensor& dst, const OpContext& c) {
  if (dst.src[0] && dst.src[1] && is_quantized_activation(dst.src[1]->dtype)) {
    const int64_t N = dst.src[0]->ne[1], T = dst.n_rows();
    for_each_weight_rows(c, N, T < kPanelMinT ? 16 : 2, [&](int64_t n0, int64_t n1) {
      mul_mat_q_rows(dst, n0, n1, c.scratch);
    });
    return;
  }
  if (std::string e = check_mul_mat(dst); !e.empty()) return fail(c, e);
  MatMulArgs a;
  a.w = dst.src[0];
  a.x = dst.src[1];
  a.y = &dst;
  a.K = a.w->ne[0];
  a.N = a.w->ne[1];
  a.T = dst.n_rows();
  a.scratch = c.scratch;
  Scratch local;
  if (!a.scratch) a.scratch = &local;
  const bool panel = a.T >= kPanelMinT;
  for_each_weight_rows(c, a.N, panel ? 2 : 4, [&](int64_t n0, int64_t n1) {
    a.n0 = n0;
    a.n1 = n1;
    if (panel)
      mm_panel(a);
    else
      mm_dot(a);
  });
}

void op_mul_mat_repacked(const Tensor& dst, const RepackedWeight& rw, const OpContext& c) {
  const int64_t N = dst.src[0]->ne[1], T = dst.n_rows();
  for_each_weight_rows(c, N, T < kPanelMinT ? 16 : 2,
                       [&](int64_t n0, int64_t n1) { mul_mat_repacked_rows(dst, rw, n0, n1); });
}

void op_mul_mat_amx(const Tensor& dst, const OpContext& c) {
  const Tensor& w = *dst.src[0];
  const int64_t N = w.ne[1], K = w.ne[0], T = dst.n_rows();
  for_each_weight_rows(c, N, 2, [&](int64_t n0, int64_t n1) {
    amx_product_rows(w.dtype, static_cast<const uint8_t*>(w.data), w.nb[1], N, K,
                     static_cast<const uint16_t*>(dst.src[1]->data), T, static_cast<float*>(dst.data),
                     dst.nb[1] / sizeof(float), n0, n1);
  });
}

void ref_mul_mat(const Tensor& dst) {
  if (std::string e = check_mul_mat(dst); !e.empty()) throw Error(e);
  const Tensor& w = *dst.src[0];
  const Tensor& x = *dst.src[1];
  const int64_t K = w.ne[0], N = w.ne[1], T = dst.n_rows();
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t n = 0; n < N; ++n) {
    dequantize_row(w.dtype, static_cast<const uint8_t*>(w.data) + n * w.nb[1], row.data(), K);
    for (int64_t t = 0; t < T; ++t) {
      const float* xs = x_row(x, t);
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += double(row[size_t(k)]) * double(xs[k]);
      dst.row_ptr<float>(t)[n] = float(s);
    }
  }
}

}  // namespace weir::cpu
