// The SIMD legacy-type kernels, written once for 256-bit integer vectors and
// compiled per target: a .cpp includes this file (no include guard) inside
// its own namespace after defining
//   WEIR_QL_TARGET  the target attribute string, e.g. "avx2,fma,f16c,bmi2"
//   WEIR_QL_VNNI    1 to form the integer sums with vpdpbusd, 0 otherwise
// and gets kernels<T>() with the dot and tile functions for weight type T.
//
// Float order (qdot.h): 8 float lanes; lane l of a block's integer vector is
// the exact sum of elements 4l..4l+3 (maddubs + madd, or dpbusd: the same
// grouping); one fused multiply-add per block; horizontal sum as
// hsum_lanes; the min term of Q4_1/Q5_1 summed separately and added last.
// With AVX-512 (VL) the same 256-bit code gets 32 registers, which keep a
// 4 x 4 tile's 16 accumulators and 4 weight blocks out of memory.
//
// Needs <immintrin.h>, <cstring>, core/half.h, block_formats.h and qdot.h.

#define QL_INLINE __attribute__((target(WEIR_QL_TARGET), always_inline)) inline
#define QL_FN __attribute__((target(WEIR_QL_TARGET)))

// A weight block: its 32 integers (signed for the _0 types, unsigned for
// the _1 types), their magnitudes (signed types), scale and min.
struct WBlock {
  __m256i q, ax;
  float d, m;
};

QL_INLINE float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// 16 bytes of nibble pairs -> 32 bytes in element order (low nibbles first).
QL_INLINE __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(t, 4), m), _mm_and_si128(t, m));
}

// 0xFF in byte i where bit i of the 32-bit little-endian word at qh is set.
QL_INLINE __m256i unpack_bits(const uint8_t* qh) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int(h)),
      _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

constexpr size_t kPrefetchBytes = 2048;

constexpr bool ql_has_min(DType t) { return t == DType::Q4_1 || t == DType::Q5_1; }

template <DType T>
constexpr size_t ql_block_bytes() {
  if constexpr (T == DType::Q4_0) return sizeof(quant::BlockQ4_0);
  if constexpr (T == DType::Q4_1) return sizeof(quant::BlockQ4_1);
  if constexpr (T == DType::Q5_0) return sizeof(quant::BlockQ5_0);
  if constexpr (T == DType::Q5_1) return sizeof(quant::BlockQ5_1);
  return sizeof(quant::BlockQ8_0);
}

template <DType T>
QL_INLINE WBlock load_w(const uint8_t* p) {
  WBlock w;
  w.d = half_at(p);
  w.m = 0.0f;
  if constexpr (T == DType::Q4_0) {
    w.q = _mm256_sub_epi8(unpack_nibbles(p + 2), _mm256_set1_epi8(8));
  } else if constexpr (T == DType::Q4_1) {
    w.m = half_at(p + 2);
    w.q = unpack_nibbles(p + 4);
  } else if constexpr (T == DType::Q5_0) {  // q - 16: the nibble with 0xF0 where bit 4 is clear
    w.q = _mm256_or_si256(unpack_nibbles(p + 6),
                          _mm256_andnot_si256(unpack_bits(p + 2), _mm256_set1_epi8(int8_t(0xF0))));
  } else if constexpr (T == DType::Q5_1) {
    w.m = half_at(p + 2);
    w.q = _mm256_or_si256(unpack_nibbles(p + 8), _mm256_and_si256(unpack_bits(p + 4), _mm256_set1_epi8(0x10)));
  } else {
    w.q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
  }
  if constexpr (!ql_has_min(T)) w.ax = _mm256_sign_epi8(w.q, w.q);
  return w;
}

// u8 x s8 products summed in groups of 4 into 8 int32 lanes. Exact for the
// ranges here (|a| <= 127, so no int16 pair of maddubs saturates).
QL_INLINE __m256i dot_u8s8(__m256i u, __m256i s) {
#if WEIR_QL_VNNI
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

template <DType T>
QL_INLINE __m256i block_lanes(const WBlock& w, __m256i qa) {
  if constexpr (ql_has_min(T)) return dot_u8s8(w.q, qa);
  return dot_u8s8(w.ax, _mm256_sign_epi8(qa, w.q));
}

// fp16(da * sum of the activation quants): llama.cpp's Q8_1 s.
QL_INLINE float act_sum(float da, __m256i qa) {
  const __m256i s = dot_u8s8(_mm256_set1_epi8(1), qa);
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  t = _mm_add_epi32(t, _mm_unpackhi_epi64(t, t));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 1));
  return _cvtsh_ss(_cvtss_sh(da * float(_mm_cvtsi128_si32(t)), _MM_FROUND_TO_NEAREST_INT));
}

// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), as llama.cpp's hsum_float_8.
QL_INLINE float hsum_lanes(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

template <DType T>
QL_FN float dot(int64_t n, const void* w, const void* a) {
  constexpr size_t wb = ql_block_bytes<T>();
  constexpr size_t ab = sizeof(quant::BlockQ8_0);
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* ap = static_cast<const uint8_t*>(a);
  __m256 acc = _mm256_setzero_ps();
  float summs = 0.0f;
  for (int64_t b = 0; b < n / quant::kQK; ++b) {
    const WBlock wk = load_w<T>(wp + b * wb);
    const uint8_t* a_blk = ap + b * ab;
    const float da = half_at(a_blk);
    const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a_blk + 2));
    const __m256 p = _mm256_cvtepi32_ps(block_lanes<T>(wk, qa));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(wk.d * da), p, acc);
    if constexpr (ql_has_min(T)) summs += wk.m * act_sum(da, qa);
  }
  if constexpr (ql_has_min(T)) return hsum_lanes(acc) + summs;
  return hsum_lanes(acc);
}

// MR weight rows x NR activation rows; each weight block is unpacked once.
template <DType T, int MR, int NR>
QL_FN void tile_fixed(int64_t n, const uint8_t* w, size_t wstride, const uint8_t* a, size_t astride,
                      float* y, size_t ldy) {
  constexpr size_t wb = ql_block_bytes<T>();
  constexpr size_t ab = sizeof(quant::BlockQ8_0);
  __m256 acc[MR][NR];
  float summs[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      acc[i][j] = _mm256_setzero_ps();
      summs[i][j] = 0.0f;
    }
  for (int64_t b = 0; b < n / quant::kQK; ++b) {
    WBlock wk[MR];
    // Weights stream from memory once (decode): fetch a few blocks ahead.
    // The tile's rows and the next tiles' are contiguous: fetch the bytes a
    // fixed distance past the linear position this block reaches.
    {
      const char* pf = reinterpret_cast<const char*>(w) + kPrefetchBytes + b * (MR * wb);
      for (size_t o = 0; o < MR * wb; o += 64) _mm_prefetch(pf + o, _MM_HINT_T0);
    }
    for (int i = 0; i < MR; ++i) wk[i] = load_w<T>(w + i * wstride + b * wb);
    for (int j = 0; j < NR; ++j) {
      const uint8_t* a_blk = a + j * astride + b * ab;
      const float da = half_at(a_blk);
      const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a_blk + 2));
      float sa = 0.0f;
      if constexpr (ql_has_min(T)) sa = act_sum(da, qa);
      for (int i = 0; i < MR; ++i) {
        const __m256 p = _mm256_cvtepi32_ps(block_lanes<T>(wk[i], qa));
        acc[i][j] = _mm256_fmadd_ps(_mm256_set1_ps(wk[i].d * da), p, acc[i][j]);
        if constexpr (ql_has_min(T)) summs[i][j] += wk[i].m * sa;
      }
    }
  }
  for (int j = 0; j < NR; ++j)
    for (int i = 0; i < MR; ++i) {
      if constexpr (ql_has_min(T))
        y[j * ldy + i] = hsum_lanes(acc[i][j]) + summs[i][j];
      else
        y[j * ldy + i] = hsum_lanes(acc[i][j]);
    }
}

template <DType T, int MR>
void tile_mr(int64_t n, const uint8_t* w, size_t wstride, const uint8_t* a, size_t astride, int nr,
             float* y, size_t ldy) {
  switch (nr) {
    case 1: return tile_fixed<T, MR, 1>(n, w, wstride, a, astride, y, ldy);
    case 2: return tile_fixed<T, MR, 2>(n, w, wstride, a, astride, y, ldy);
    case 3: return tile_fixed<T, MR, 3>(n, w, wstride, a, astride, y, ldy);
    default: return tile_fixed<T, MR, 4>(n, w, wstride, a, astride, y, ldy);
  }
}

template <DType T>
void tile(int64_t n, const void* w, size_t wstride, int mr, const void* a, size_t astride, int nr,
          float* y, size_t ldy) {
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* ap = static_cast<const uint8_t*>(a);
  switch (mr) {
    case 1: return tile_mr<T, 1>(n, wp, wstride, ap, astride, nr, y, ldy);
    case 2: return tile_mr<T, 2>(n, wp, wstride, ap, astride, nr, y, ldy);
    case 3: return tile_mr<T, 3>(n, wp, wstride, ap, astride, nr, y, ldy);
    default: return tile_mr<T, 4>(n, wp, wstride, ap, astride, nr, y, ldy);
  }
}

inline QDotKernels kernels_for(DType t) {
  switch (t) {
    case DType::Q4_0: return {dot<DType::Q4_0>, tile<DType::Q4_0>};
    case DType::Q4_1: return {dot<DType::Q4_1>, tile<DType::Q4_1>};
    case DType::Q5_0: return {dot<DType::Q5_0>, tile<DType::Q5_0>};
    case DType::Q5_1: return {dot<DType::Q5_1>, tile<DType::Q5_1>};
    case DType::Q8_0: return {dot<DType::Q8_0>, tile<DType::Q8_0>};
    default: return {};
  }
}

#undef QL_INLINE
#undef QL_FN
