// A weight type's decode chunks dotted with 8-bit activations (dp4a): the
// activations' layout (QuantizedX) and one struct a weight type (Dot*),
// shared by the decode products (ops_mul_mat_q8.cu, whose header comment says
// how the chunks are read) and the expert products (ops_moe_q8.cu).
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/dequant.cuh"
#include "core/dtype.h"

namespace weir::cuda {

// x quantized: quants [T][K] int8, then (d, d * sum) [T][K/32].
struct QuantizedX {
  const int8_t* q;
  const __half2* ds;
  int64_t K;
  __device__ __forceinline__ const int4* q16(int t, int64_t k) const {  // 16 quants from element k
    return reinterpret_cast<const int4*>(q + t * K + k);
  }
  __device__ __forceinline__ float2 ds_of(int t, int64_t blk32) const {
    return __half22float2(ds[t * (K / 32) + blk32]);
  }
};
// The same with its TOKENS tokens at rows of their own (the experts' products:
// the tokens routed to one expert, or a token's per-slot rows).
template <int TOKENS>
struct QuantizedXRows {
  const int8_t* q;
  const __half2* ds;
  int64_t K;
  int64_t row[TOKENS];
  __device__ __forceinline__ const int4* q16(int t, int64_t k) const {
    return reinterpret_cast<const int4*>(q + row[t] * K + k);
  }
  __device__ __forceinline__ float2 ds_of(int t, int64_t blk32) const {
    return __half22float2(ds[row[t] * (K / 32) + blk32]);
  }
};

__device__ __forceinline__ int dp4a(uint32_t a, int b, int c) { return __dp4a(int(a), b, c); }
// dp4a of 4 weight words with 16 x quants.
__device__ __forceinline__ int dot16(const uint32_t* w, const int4& x, int acc) {
  acc = dp4a(w[0], x.x, acc);
  acc = dp4a(w[1], x.y, acc);
  acc = dp4a(w[2], x.z, acc);
  return dp4a(w[3], x.w, acc);
}
// N 32-bit words from any address (2-byte aligned for most blocks, none
// for mxfp4's), in two steps so that the
// loads of many chunks are in flight before any is used: load() reads the
// aligned words around them, join() shifts them into place.
template <int N>
struct Words {
  uint32_t v[N + 1];  // one word past: in the row (a scale or the next block)
  uint32_t sh;
  __device__ __forceinline__ void load(const uint8_t* p) {
    // Rounded down by pointer arithmetic, not through an integer, so that
    // the compiler still sees shared memory as such (ld.shared, not a
    // generic load) in the staged kernels.
    const uint32_t mis = uint32_t(reinterpret_cast<uintptr_t>(p) & 3);
    const uint32_t* w = reinterpret_cast<const uint32_t*>(p - mis);
    sh = mis * 8;
#pragma unroll
    for (int i = 0; i <= N; ++i) v[i] = w[i];
  }
  __device__ __forceinline__ void join(uint32_t* out) const {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = __funnelshift_r(v[i], v[i + 1], sh);
  }
};
__device__ __forceinline__ __half h_at(const uint8_t* p) { return *reinterpret_cast<const __half*>(p); }
// Bits 0..3 of t to bit 4 of bytes 0..3.
__device__ __forceinline__ uint32_t spread4(uint32_t t) { return ((t * 0x00204081u) & 0x01010101u) << 4; }

// A type's chunks: CHUNKS per block of QK weights. load(b, c, raw) reads
// chunk c of the block at b into registers, as stored; dot(raw, c, x, e0,
// acc) adds the chunk's products of R weight rows (raw[r]) with tokens
// 0..TOKENS-1 into acc[r][t]. The kernel loads every chunk of an unrolled step
// before the first dot, so the step costs one memory latency, not one per
// chunk (the compiler, left to itself, issued the second row's loads only
// after the first row's dot products). The rows share the x loads: a warp
// takes R rows so that each x load serves R of them.
template <int R, int TOKENS>
using Acc = float[R][TOKENS];

// A 32-weight block of R rows, unsigned quants lo (elements 0..15) and hi
// (16..31), scale d, offset -off, with tokens 0..TOKENS-1.
template <int TOKENS, int R, class X>
__device__ __forceinline__ void legacy_dot(const uint32_t (&lo)[R][4], const uint32_t (&hi)[R][4], const float (&d)[R],
                                           float off, const X& x, int64_t e0, Acc<R, TOKENS>& acc) {
#pragma unroll
  for (int t = 0; t < TOKENS; ++t) {
    const int4 xl = *x.q16(t, e0), xh = *x.q16(t, e0 + 16);
    const float2 ds = x.ds_of(t, e0 / 32);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int s = dot16(hi[r], xh, dot16(lo[r], xl, 0));
      acc[r][t] += d[r] * (ds.x * float(s) - off * ds.y);
    }
  }
}

struct DotQ4_0 {
  static constexpr int QK = 32, BYTES = 18, CHUNKS = 1;
  struct Raw {
    Words<4> q;
    __half d;
  };
  __device__ static void load(const uint8_t* b, int, Raw& w) { w.q.load(b + 2), w.d = h_at(b); }
  template <int TOKENS, int R, class X>
  __device__ static void dot(const Raw (&w)[R], int, const X& x, int64_t e0, Acc<R, TOKENS>& acc) {
    uint32_t lo[R][4], hi[R][4];
    float d[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      uint32_t q[4];
      w[r].q.join(q);
      d[r] = __half2float(w[r].d);
#pragma unroll
      for (int i = 0; i < 4; ++i) lo[r][i] = q[i] & 0x0F0F0F0Fu, hi[r][i] = (q[i] >> 4) & 0x0F0F0F0Fu;
    }
    legacy_dot<TOKENS, R>(lo, hi, d, 8.0f, x, e0, acc);
  }
};
struct DotQ5_0 {
  static constexpr int QK = 32, BYTES = 22, CHUNKS = 1;
  struct Raw {
    Words<5> q;  // qh, then 16 quant bytes
    __half d;
  };
  __device__ static void load(const uint8_t* b, int, Raw& w) { w.q.load(b + 2), w.d = h_at(b); }
  template <int TOKENS, int R, class X>
  __device__ static void dot(const Raw (&w)[R], int, const X& x, int64_t e0, Acc<R, TOKENS>& acc) {
    uint32_t lo[R][4], hi[R][4];
    float d[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      uint32_t q[5];
      w[r].q.join(q);
      d[r] = __half2float(w[r].d);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        lo[r][i] = (q[1 + i] & 0x0F0F0F0Fu) | spread4((q[0] >> (4 * i)) & 15);
        hi[r][i] = ((q[1 + i] >> 4) & 0x0F0F0F0Fu) | spread4((q[0] >> (16 + 4 * i)) & 15);
      }
    }
    legacy_dot<TOKENS, R>(lo, hi, d, 16.0f, x, e0, acc);
  }
};
struct DotQ8_0 {
  static constexpr int QK = 32, BYTES = 34, CHUNKS = 1;
  struct Raw {
    Words<8> q;
    __half d;
  };
  __device__ static void load(const uint8_t* b, int, Raw& w) { w.q.load(b + 2), w.d = h_at(b); }
  template <int TOKENS, int R, class X>
  __device__ static void dot(const Raw (&w)[R], int, const X& x, int64_t e0, Acc<R, TOKENS>& acc) {
    uint32_t q[R][8];
    float d[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      w[r].q.join(q[r]);
      d[r] = __half2float(w[r].d);
    }
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) {
      const int4 xl = *x.q16(t, e0), xh = *x.q16(t, e0 + 16);
      const float dx = x.ds_of(t, e0 / 32).x;
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r][t] += d[r] * dx * float(dot16(q[r] + 4, xh, dot16(q[r], xl, 0)));
    }
  }
};
// q4_K / q5_K: chunk c (0..7) = qs bytes 16c..16c+15: group g = c / 2 of 32
// bytes, positions p = 16 (c % 2); low nibbles are sub-block 2g, high
// nibbles sub-block 2g + 1. Blocks are 16-byte aligned.
template <bool Five>
struct DotQK45 {
  static constexpr int QK = 256, BYTES = Five ? 176 : 144, CHUNKS = 8;
  struct Raw {
    uint4 q, hd, h;  // the chunk's quants; d, dmin and the 12 scale bytes; q5_K's high bits
  };
  __device__ static void load(const uint8_t* b, int c, Raw& w) {
    w.q = *reinterpret_cast<const uint4*>(b + (Five ? 48 : 16) + 16 * c);
    w.hd = *reinterpret_cast<const uint4*>(b);
    if constexpr (Five) w.h = *reinterpret_cast<const uint4*>(b + 16 + 16 * (c % 2));
  }
  template <int TOKENS, int R, class X>
  __device__ static void dot(const Raw (&w)[R], int c, const X& x, int64_t e0, Acc<R, TOKENS>& acc) {
    const int g = c / 2, p = 16 * (c % 2), jl = 2 * g, jh = 2 * g + 1;
    // The 6-bit scales and mins of sub-blocks 2g and 2g + 1 (scale_min_k4
    // for a pair): g < 2 keeps them whole in bytes 2g.. (scales) and 4 + 2g..
    // (mins); g >= 2 has their low 4 bits in bytes 8 + 2 (g - 2) .. and the
    // top 2 bits at the top of bytes 2 (g - 2) .. (scales), 4 + 2 (g - 2) ..
    // (mins). c is the same for all of a thread's chunks, so the shifts are.
    const bool lowg = g < 2;
    const int sh = 16 * (lowg ? g : g - 2);
    const uint32_t m = lowg ? 63 : 15;
    uint32_t lo[R][4], hi[R][4];
    float scl[R], sch[R], mnl[R], mnh[R];
    float2 dd[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint32_t q[4] = {w[r].q.x, w[r].q.y, w[r].q.z, w[r].q.w};
      const uint4 hd = w[r].hd;
      const uint32_t wsc = (lowg ? hd.y : hd.w) >> sh, wmn = (lowg ? hd.z : hd.w) >> (lowg ? sh : sh + 4);
      const uint32_t top_sc = lowg ? 0 : hd.y >> sh, top_mn = lowg ? 0 : hd.z >> sh;
      scl[r] = float((wsc & m) | ((top_sc >> 6) & 3) << 4);
      sch[r] = float(((wsc >> 8) & m) | ((top_sc >> 14) & 3) << 4);
      mnl[r] = float((wmn & m) | ((top_mn >> 6) & 3) << 4);
      mnh[r] = float(((wmn >> 8) & m) | ((top_mn >> 14) & 3) << 4);
#pragma unroll
      for (int i = 0; i < 4; ++i) lo[r][i] = q[i] & 0x0F0F0F0Fu, hi[r][i] = (q[i] >> 4) & 0x0F0F0F0Fu;
      if constexpr (Five) {
        const uint32_t h[4] = {w[r].h.x, w[r].h.y, w[r].h.z, w[r].h.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          lo[r][i] |= ((h[i] >> jl) & 0x01010101u) << 4;
          hi[r][i] |= ((h[i] >> jh) & 0x01010101u) << 4;
        }
      }
      dd[r] = __half22float2(*reinterpret_cast<const __half2*>(&hd.x));
    }
    const int64_t bl = e0 / 32 + jl, bh = e0 / 32 + jh;  // x blocks of the two sub-blocks
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) {
      const int4 xlo = *x.q16(t, bl * 32 + p), xhi = *x.q16(t, bh * 32 + p);
      const float2 xl = x.ds_of(t, bl), xh = x.ds_of(t, bh);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int sl = dot16(lo[r], xlo, 0), sv = dot16(hi[r], xhi, 0);
        acc[r][t] += dd[r].x * (scl[r] * xl.x * float(sl) + sch[r] * xh.x * float(sv)) -
                     dd[r].y * 0.5f * (mnl[r] * xl.y + mnh[r] * xh.y);
      }
    }
  }
};
// q6_K: chunk c (0..7) = ql bytes 16c..16c+15: half h = c / 4, s = (c / 2) % 2
// for the low nibbles and s + 2 for the high ones, positions l = 16 (c % 2);
// qh bytes 32h + l .. + 15 hold the top two bits of all four s. Each 16
// positions have their own scale, so the -32 is applied to the quants.
struct DotQ6K {
  static constexpr int QK = 256, BYTES = 210, CHUNKS = 8;
  struct Raw {
    Words<4> ql, qh;
    int8_t sa, sb;  // the scales of the low and the high nibbles' positions
    __half d;
  };
  __device__ static void load(const uint8_t* b, int c, Raw& w) {
    const int h = c / 4, sa = (c / 2) % 2, l = 16 * (c % 2);
    w.ql.load(b + 16 * c);
    w.qh.load(b + 128 + 32 * h + l);
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
    w.sa = sc[8 * h + 2 * sa + l / 16];
    w.sb = sc[8 * h + 2 * (sa + 2) + l / 16];
    w.d = h_at(b + 208);
  }
  // The quants stay unsigned (0..63, positive as int8 too); their offset of
  // 32 comes off as 32 times the sum of the 16 x quants, once a token for all
  // R rows. (A per-byte __vsubss4 is 7 instructions on sm_90: it made q6_K
  // the slowest type to decode.)
  template <int TOKENS, int R, class X>
  __device__ static void dot(const Raw (&w)[R], int c, const X& x, int64_t e0, Acc<R, TOKENS>& acc) {
    const int h = c / 4, sa = (c / 2) % 2, sb = sa + 2, l = 16 * (c % 2);
    uint32_t a[R][4], z[R][4];
    float fa[R], fb[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      uint32_t ql[4], qh[4];
      w[r].ql.join(ql);
      w[r].qh.join(qh);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[r][i] = (ql[i] & 0x0F0F0F0Fu) | (((qh[i] >> (2 * sa)) & 0x03030303u) << 4);
        z[r][i] = ((ql[i] >> 4) & 0x0F0F0F0Fu) | (((qh[i] >> (2 * sb)) & 0x03030303u) << 4);
      }
      const float d = __half2float(w[r].d);
      fa[r] = d * float(w[r].sa);
      fb[r] = d * float(w[r].sb);
    }
    const int64_t ba = e0 / 32 + 4 * h + sa, bb = e0 / 32 + 4 * h + sb;
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) {
      const int4 xa = *x.q16(t, ba * 32 + l), xb = *x.q16(t, bb * 32 + l);
      const float da = x.ds_of(t, ba).x, db = x.ds_of(t, bb).x;
      constexpr int kOnes = 0x01010101;
      const int oa = -32 * __dp4a(kOnes, xa.w, __dp4a(kOnes, xa.z, __dp4a(kOnes, xa.y, __dp4a(kOnes, xa.x, 0))));
      const int ob = -32 * __dp4a(kOnes, xb.w, __dp4a(kOnes, xb.z, __dp4a(kOnes, xb.y, __dp4a(kOnes, xb.x, 0))));
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int ia = dot16(a[r], xa, oa), ib = dot16(z[r], xb, ob);
        acc[r][t] += fa[r] * da * float(ia) + fb[r] * db * float(ib);
      }
    }
  }
};

// The lookup types (iq4_nl, iq4_xs, mxfp4): their quants index a table of
// 16 int8 values (dequant.cuh: Table16, lookup4), looked up four at a time;
// the values are signed bytes, dotted with x's as they are (no offset).
// A word of 4 nibble-packed quant bytes (q4_0's packing: byte k holds
// elements i+k (low nibble) and i+16+k (high)): v0 the values of its bytes
// 0 and 1, v1 of bytes 2 and 3, each as (low, high, low, high), so elements
// (i, i+16, i+1, i+17) and (i+2, i+18, i+3, i+19). lookup4 on both halves of
// the word, its masks made once for the two.
template <class Tab>
__device__ __forceinline__ void lookup_word(uint32_t q, uint32_t& v0, uint32_t& v1) {
  const uint32_t lo3 = q & 0x77777777u, sel = ((q >> 1) & 0x44444444u) | 0x32103210u;
  v0 = prmt(prmt(Tab::w0, Tab::w1, lo3), prmt(Tab::w2, Tab::w3, lo3), sel);
  const uint32_t lo3h = lo3 >> 16, selh = sel >> 16;
  v1 = prmt(prmt(Tab::w0, Tab::w1, lo3h), prmt(Tab::w2, Tab::w3, lo3h), selh);
}
// 32 weights of R rows (their 16 quant bytes q), factor f per row, with
// tokens 0..TOKENS-1: acc += f * dx * sum(value * xq). The values come
// interleaved (lookup_word); the x quants of a token are permuted to match
// them (two permutes a word a token) where that is fewer than the weights'
// (two a word a row): up to R tokens. Past that the weights are (as x is
// stored: elements 0..15, then 16..31). The lookup: 11 integer instructions
// a word a row, 13 with the weights' permutes (q4_0 takes 2 for its nibbles).
template <class Tab, int TOKENS, int R, class X>
__device__ __forceinline__ void lookup_dot(const uint32_t (&q)[R][4], const float (&f)[R], const X& x, int64_t e0,
                                           Acc<R, TOKENS>& acc) {
  uint32_t v[R][8];  // word i's v0, v1 at 2i, 2i + 1
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int i = 0; i < 4; ++i) lookup_word<Tab>(q[r][i], v[r][2 * i], v[r][2 * i + 1]);
  if constexpr (TOKENS <= R) {
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) {
      const int4 xl = *x.q16(t, e0), xh = *x.q16(t, e0 + 16);
      const uint32_t l[4] = {uint32_t(xl.x), uint32_t(xl.y), uint32_t(xl.z), uint32_t(xl.w)};
      const uint32_t h[4] = {uint32_t(xh.x), uint32_t(xh.y), uint32_t(xh.z), uint32_t(xh.w)};
      int xi[8];
#pragma unroll
      for (int i = 0; i < 4; ++i) xi[2 * i] = int(prmt(l[i], h[i], 0x5140u)), xi[2 * i + 1] = int(prmt(l[i], h[i], 0x7362u));
      const float dx = x.ds_of(t, e0 / 32).x;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        int sum = 0;
#pragma unroll
        for (int k = 0; k < 8; ++k) sum = dp4a(v[r][k], xi[k], sum);
        acc[r][t] += f[r] * dx * float(sum);
      }
    }
  } else {
    uint32_t lo[R][4], hi[R][4];  // elements 0..15, 16..31
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        lo[r][i] = prmt(v[r][2 * i], v[r][2 * i + 1], 0x6420u);
        hi[r][i] = prmt(v[r][2 * i], v[r][2 * i + 1], 0x7531u);
      }
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) {
      const int4 xl = *x.q16(t, e0), xh = *x.q16(t, e0 + 16);
      const float dx = x.ds_of(t, e0 / 32).x;
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r][t] += f[r] * dx * float(dot16(hi[r], xh, dot16(lo[r], xl, 0)));
    }
  }
}
// iq4_nl: q4_0's layout (d, 16 quant bytes), the table's values.
struct DotIQ4NL {
  static constexpr int QK = 32, BYTES = 18, CHUNKS = 1;
  struct Raw {
    Words<4> q;
    __half d;
  };
  __device__ static void load(const uint8_t* b, int, Raw& w) { w.q.load(b + 2), w.d = h_at(b); }
  template <int TOKENS, int R, class X>
  __device__ static void dot(const Raw (&w)[R], int, const X& x, int64_t e0, Acc<R, TOKENS>& acc) {
    uint32_t q[R][4];
    float d[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      w[r].q.join(q[r]);
      d[r] = __half2float(w[r].d);
    }
    lookup_dot<IQ4Table, TOKENS, R>(q, d, x, e0, acc);
  }
};
// mxfp4: an exponent byte, then 16 quant bytes; 17-byte blocks, so nothing
// is aligned: words joined by funnel shifts.
struct DotMXFP4 {
  static constexpr int QK = 32, BYTES = 17, CHUNKS = 1;
  struct Raw {
    Words<4> q;
    uint8_t e;
  };
  __device__ static void load(const uint8_t* b, int, Raw& w) { w.q.load(b + 1), w.e = b[0]; }
  template <int TOKENS, int R, class X>
  __device__ static void dot(const Raw (&w)[R], int, const X& x, int64_t e0, Acc<R, TOKENS>& acc) {
    uint32_t q[R][4];
    float d[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      w[r].q.join(q[r]);
      d[r] = e8m0_half(w[r].e);
    }
    lookup_dot<MXFP4Table, TOKENS, R>(q, d, x, e0, acc);
  }
};
// iq4_xs: chunk c (0..7) = sub-block c: its 16 quant bytes (qs 16c..) and
// the block's 8 header bytes (d, scales_h, scales_l), each as 8-byte words
// (136-byte blocks are 8-byte aligned: q8_row_alignment).
struct DotIQ4XS {
  static constexpr int QK = 256, BYTES = 136, CHUNKS = 8;
  struct Raw {
    uint2 q0, q1, h;
  };
  __device__ static void load(const uint8_t* b, int c, Raw& w) {
    const uint2* p = reinterpret_cast<const uint2*>(b);
    w.h = p[0];
    w.q0 = p[1 + 2 * c];
    w.q1 = p[2 + 2 * c];
  }
  template <int TOKENS, int R, class X>
  __device__ static void dot(const Raw (&w)[R], int c, const X& x, int64_t e0, Acc<R, TOKENS>& acc) {
    uint32_t q[R][4];
    float f[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      q[r][0] = w[r].q0.x, q[r][1] = w[r].q0.y, q[r][2] = w[r].q1.x, q[r][3] = w[r].q1.y;
      // h.x: d (low half), scales_h (high half); h.y: scales_l[0..3].
      const uint32_t ls = ((w[r].h.y >> (4 * c)) & 15) | ((w[r].h.x >> (16 + 2 * c)) & 3) << 4;
      f[r] = __half2float(__ushort_as_half(uint16_t(w[r].h.x))) * float(int(ls) - 32);
    }
    lookup_dot<IQ4Table, TOKENS, R>(q, f, x, e0 + 32 * c, acc);
  }
};

// f.template operator()<D>() with D the chunk reader of weight type t;
// false for a type that has none.
template <class F>
bool dispatch_q8_dot(DType t, F&& f) {
  switch (t) {
    case DType::Q4_0: f.template operator()<DotQ4_0>(); return true;
    case DType::Q5_0: f.template operator()<DotQ5_0>(); return true;
    case DType::Q8_0: f.template operator()<DotQ8_0>(); return true;
    case DType::Q4_K: f.template operator()<DotQK45<false>>(); return true;
    case DType::Q5_K: f.template operator()<DotQK45<true>>(); return true;
    case DType::Q6_K: f.template operator()<DotQ6K>(); return true;
    case DType::IQ4_NL: f.template operator()<DotIQ4NL>(); return true;
    case DType::IQ4_XS: f.template operator()<DotIQ4XS>(); return true;
    case DType::MXFP4: f.template operator()<DotMXFP4>(); return true;
    default: return false;
  }
}

}  // namespace weir::cuda
