// The SIMD legacy-type kernels, written once for 256-bit integer vectors and
// compiled per target: a .cpp includes this file (no include guard) inside
// its own namespace after defining
//   WEIR_QL_TARGET  the target attribute string, e.g. "avx2,fma,f16c,bmi2"
//   WEIR_QL_VNNI    1 to form the integer sums with vpdpbusd, 0 otherwise
//   WEIR_QL_REGS    vector registers of the target (16 or 32)
//   WEIR_QL_AVX512  1 where AVX-512 BW/VL (mask registers) may be used
// and gets kernels<T>() with the dot and tile functions for weight type T.
//
// Float order (qdot.h): 8 float lanes; lane l of a block's integer vector is
// the exact sum of elements 4l..4l+3 (maddubs + madd, or dpbusd: the same
// grouping); one fused multiply-add per block; horizontal sum as
// hsum_lanes; the min term of Q4_1/Q5_1 summed separately and added last.
// With AVX-512 (VL) the same 256-bit code gets 32 registers, which keep
// twice the accumulators of a tile out of memory.
//
// Needs <immintrin.h>, <cstring>, <vector>, core/half.h, block_formats.h and
// qdot.h.

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

// 16 bytes of nibble pairs -> 32 bytes in element order (low nibbles first):
// the bytes in both halves, the high half shifted by 4, then masked.
QL_INLINE __m256i unpack_nibbles(const uint8_t* qs) {
  const __m256i t = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  return _mm256_and_si256(_mm256_srlv_epi64(t, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(15));
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
#if WEIR_QL_AVX512
    uint32_t h;
    std::memcpy(&h, p + 2, 4);
    const __m256i lo = unpack_nibbles(p + 6);
    w.q = _mm256_mask_sub_epi8(lo, __mmask32(~h), lo, _mm256_set1_epi8(16));
#else
    w.q = _mm256_or_si256(unpack_nibbles(p + 6),
                          _mm256_andnot_si256(unpack_bits(p + 2), _mm256_set1_epi8(int8_t(0xF0))));
#endif
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

// Tiles store the activations as a + 128 (unsigned bytes) for the signed
// weight types whose products then stay exact: q4_0 and q5_0 (|q| <= 16,
// so a maddubs pair is at most 2 * 255 * 16), and with VNNI also q8_0
// (vpdpbusd has no 16-bit intermediate to saturate). A lane is then
// sum q * (a + 128) - 128 * sum q: the second term depends on the weight
// block only and is made once for all activations of the tile (with VNNI
// it is the accumulator vpdpbusd starts from, so a pair costs one
// instruction), and no sign flip is left per pair.
template <DType T>
constexpr bool tile_offset_acts() {
  return T == DType::Q4_0 || T == DType::Q5_0 || (WEIR_QL_VNNI && T == DType::Q8_0);
}

// -128 * (each group of 4 weights' sum): where a block's tile lanes start.
QL_INLINE __m256i offset_start(__m256i q) {
  return _mm256_sub_epi32(_mm256_setzero_si256(), dot_u8s8(_mm256_set1_epi8(char(0x80)), q));
}

// A block's lanes against a packed activation (a + 128 for offset types).
template <DType T>
QL_INLINE __m256i tile_lanes(const WBlock& w, __m256i start, __m256i qa) {
  if constexpr (tile_offset_acts<T>()) {
#if WEIR_QL_VNNI
    return _mm256_dpbusd_epi32(start, qa, w.q);
#else
    return _mm256_add_epi32(start, _mm256_madd_epi16(_mm256_maddubs_epi16(qa, w.q), _mm256_set1_epi16(1)));
#endif
  } else {
    return block_lanes<T>(w, qa);
  }
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

// --- Tiles: mr weight rows x nr <= kTileMax activation rows. ---------------
//
// The nr activation rows are first repacked block by block into a
// per-thread buffer (layout below): their fp16 scales as floats (and the
// min types' fp16 block sums), then the 32-byte quants of each row, so the
// inner loop reads one stream from L1 and converts no scale. Then every
// weight row (or MR of them) runs past all nr activations: a weight block
// is unpacked once per nr dots, and the MR x NR float accumulators stay in
// registers. Per (row, activation) the float operations are those of dot().

// Bytes per packed block: float da[8], for Q4_1/Q5_1 float sa[8], then
// int8 qs[kTileMax][32].
template <DType T>
constexpr size_t pack_quants_at() {
  return ql_has_min(T) ? 64 : 32;
}
template <DType T>
constexpr size_t pack_block_bytes() {
  return pack_quants_at<T>() + 32 * kTileMax;
}

struct alignas(32) PackChunk {
  uint8_t b[32];
};

template <DType T>
QL_FN void pack_acts(int64_t nb, const uint8_t* a, size_t astride, int nr, uint8_t* out) {
  constexpr size_t ab = sizeof(quant::BlockQ8_0);
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* o = out + b * pack_block_bytes<T>();
    float* da = reinterpret_cast<float*>(o);
    for (int j = 0; j < nr; ++j) {
      const uint8_t* blk = a + j * astride + b * ab;
      da[j] = half_at(blk);
      const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
      const __m256i qp = tile_offset_acts<T>() ? _mm256_xor_si256(qa, _mm256_set1_epi8(char(0x80))) : qa;
      _mm256_store_si256(reinterpret_cast<__m256i*>(o + pack_quants_at<T>() + 32 * j), qp);
      if constexpr (ql_has_min(T)) reinterpret_cast<float*>(o + 32)[j] = act_sum(da[j], qa);
    }
  }
}

// Weight rows per step for NR activations: MR x NR accumulators plus MR
// unpacked blocks (two registers each) must fit the register file.
constexpr int rows_per_step(int nr) {
  if (WEIR_QL_REGS >= 32) return nr <= 2 ? 4 : 2;
  return nr == 1 ? 4 : nr == 2 ? 2 : 1;
}

// MR weight rows (w, wstride apart) x NR packed activations; sc: room for
// MR * nb * 8 floats.
template <DType T, int MR, int NR>
QL_FN void tile_rows(int64_t nb, const uint8_t* w, size_t wstride, const uint8_t* pk, float* sc, float* y,
                     size_t ldy) {
  constexpr size_t wb = ql_block_bytes<T>();
  // d_w * d_a for every (row, block, activation), the same float products
  // as dot()'s, made before the main loop, which reads them as broadcasts.
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
    for (int64_t b = 0; b < nb; ++b) {
      const __m256 da = _mm256_load_ps(reinterpret_cast<const float*>(pk + b * pack_block_bytes<T>()));
      _mm256_store_ps(sc + (i * nb + b) * 8, _mm256_mul_ps(_mm256_set1_ps(half_at(w + i * wstride + b * wb)), da));
    }
  // Constant-count loops unrolled before GCC's scalar replacement, which
  // then keeps the accumulators in registers only.
  __m256 acc[MR][NR];
  float summs[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      acc[i][j] = _mm256_setzero_ps();
      summs[i][j] = 0.0f;
    }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = pk + b * pack_block_bytes<T>();
    WBlock wk[MR];
    // Decode streams the weights from memory once: the tile's rows and the
    // next tiles' are contiguous, so fetch the bytes two tiles past the
    // linear position this block reaches (the hardware prefetcher alone left
    // one core at ~4.4 GB/s on a 44 MB Q8_0 matrix; with this, ~11).
    {
      const char* pf = reinterpret_cast<const char*>(w) + 2 * MR * wstride + b * (MR * wb);
      for (size_t o = 0; o < MR * wb; o += 64) _mm_prefetch(pf + o, _MM_HINT_T0);
    }
    __m256i start[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      wk[i] = load_w<T>(w + i * wstride + b * wb);
      if constexpr (tile_offset_acts<T>()) start[i] = offset_start(wk[i].q);
    }
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const __m256i qa = _mm256_load_si256(reinterpret_cast<const __m256i*>(p + pack_quants_at<T>() + 32 * j));
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m256 q = _mm256_cvtepi32_ps(tile_lanes<T>(wk[i], start[i], qa));
        acc[i][j] = _mm256_fmadd_ps(_mm256_broadcast_ss(sc + (i * nb + b) * 8 + j), q, acc[i][j]);
        if constexpr (ql_has_min(T)) summs[i][j] += wk[i].m * reinterpret_cast<const float*>(p + 32)[j];
      }
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j)
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      if constexpr (ql_has_min(T))
        y[j * ldy + i] = hsum_lanes(acc[i][j]) + summs[i][j];
      else
        y[j * ldy + i] = hsum_lanes(acc[i][j]);
    }
}

// --- Decode: MR weight rows x one activation row. ------------------------
//
// Here the weights are made unsigned instead (q4_0: q + 8, the nibble
// itself; q5_0: q + 16; q8_0 with VNNI: q + 128) and the activations keep
// their sign, so a lane is sum (q + o) * a - o * (sum of the group's a).
// The second term depends on the activation block only: made once per call
// for the whole row range, it is the accumulator the product starts from.
// A block then costs its unpack, one product, one conversion and one fused
// multiply-add, against twice that with a per-row offset. The lanes are the
// same integers, so the floats are dot()'s.
template <DType T>
constexpr int decode_offset() {
  if constexpr (T == DType::Q4_0) return 8;
  if constexpr (T == DType::Q5_0) return 16;
  if constexpr (T == DType::Q8_0) return WEIR_QL_VNNI ? 128 : 0;  // maddubs would saturate
  return 0;
}

template <DType T>
QL_INLINE __m256i load_w_unsigned(const uint8_t* p) {
  if constexpr (T == DType::Q4_0) {
    return unpack_nibbles(p + 2);
  } else if constexpr (T == DType::Q5_0) {
#if WEIR_QL_AVX512  // BW/VL: the high bits are a byte mask
    uint32_t h;
    std::memcpy(&h, p + 2, 4);
    const __m256i lo = unpack_nibbles(p + 6);
    return _mm256_mask_add_epi8(lo, __mmask32(h), lo, _mm256_set1_epi8(16));
#else
    return _mm256_or_si256(unpack_nibbles(p + 6), _mm256_and_si256(unpack_bits(p + 2), _mm256_set1_epi8(16)));
#endif
  } else {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2)),
                            _mm256_set1_epi8(char(0x80)));
  }
}

// Per activation block: its scale as a float, then -o * the sums of its
// groups of 4 as 8 int32 lanes.
struct alignas(32) DecodeAct {
  __m256i start;
  float d;
};

template <DType T>
QL_FN void pack_decode_act(int64_t nb, const uint8_t* a, DecodeAct* out) {
  constexpr size_t ab = sizeof(quant::BlockQ8_0);
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + b * ab + 2));
    out[b].start = _mm256_sub_epi32(_mm256_setzero_si256(), dot_u8s8(_mm256_set1_epi8(char(decode_offset<T>())), qa));
    out[b].d = half_at(a + b * ab);
  }
}

template <DType T, int MR>
QL_FN void decode_rows(int64_t nb, const uint8_t* w, size_t wstride, const uint8_t* a, const DecodeAct* pa,
                       float* y) {
  constexpr size_t wb = ql_block_bytes<T>();
  constexpr size_t ab = sizeof(quant::BlockQ8_0);
  __m256 acc[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    {  // as tile_rows: two tiles ahead of the weight stream
      const char* pf = reinterpret_cast<const char*>(w) + 2 * MR * wstride + b * (MR * wb);
      for (size_t o = 0; o < MR * wb; o += 64) _mm_prefetch(pf + o, _MM_HINT_T0);
    }
    const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + b * ab + 2));
    const __m256 da = _mm256_set1_ps(pa[b].d);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const uint8_t* p = w + i * wstride + b * wb;
      uint16_t h;
      std::memcpy(&h, p, 2);
      // d_w broadcast and converted, times d_a: dot()'s float product.
      const __m256 s = _mm256_mul_ps(_mm256_cvtph_ps(_mm_set1_epi16(short(h))), da);
#if WEIR_QL_VNNI
      const __m256i lanes = _mm256_dpbusd_epi32(pa[b].start, load_w_unsigned<T>(p), qa);
#else
      const __m256i lanes = _mm256_add_epi32(pa[b].start, dot_u8s8(load_w_unsigned<T>(p), qa));
#endif
      acc[i] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(lanes), acc[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) y[i] = hsum_lanes(acc[i]);
}

template <DType T>
QL_FN void decode(int64_t nb, const uint8_t* w, size_t wstride, int mr, const uint8_t* a, DecodeAct* pa,
                  float* y) {
  pack_decode_act<T>(nb, a, pa);
  constexpr int MR = 4;
  int i = 0;
  for (; i + MR <= mr; i += MR) decode_rows<T, MR>(nb, w + i * wstride, wstride, a, pa, y + i);
  for (; i < mr; ++i) decode_rows<T, 1>(nb, w + i * wstride, wstride, a, pa, y + i);
}

template <DType T, int NR>
QL_FN void tile_nr(int64_t nb, const uint8_t* w, size_t wstride, int mr, const uint8_t* pk, float* sc, float* y,
                   size_t ldy) {
  constexpr int MR = rows_per_step(NR);
  int i = 0;
  for (; i + MR <= mr; i += MR) tile_rows<T, MR, NR>(nb, w + i * wstride, wstride, pk, sc, y + i, ldy);
  for (; i < mr; ++i) tile_rows<T, 1, NR>(nb, w + i * wstride, wstride, pk, sc, y + i, ldy);
}

template <DType T>
void tile(int64_t n, const void* w, size_t wstride, int mr, const void* a, size_t astride, int nr,
          float* y, size_t ldy) {
  const int64_t nb = n / quant::kQK;
  if constexpr (decode_offset<T>() != 0) {
    if (nr == 1) {
      thread_local std::vector<DecodeAct> acts;
      if (acts.size() < size_t(nb)) acts.resize(size_t(nb));
      return decode<T>(nb, static_cast<const uint8_t*>(w), wstride, mr, static_cast<const uint8_t*>(a),
                       acts.data(), y);
    }
  }
  // Packed activations, then the scale products of up to 4 rows.
  thread_local std::vector<PackChunk> buf;
  const size_t pack_chunks = size_t(nb) * pack_block_bytes<T>() / sizeof(PackChunk);
  const size_t chunks = pack_chunks + size_t(nb) * 4;
  if (buf.size() < chunks) buf.resize(chunks);
  uint8_t* pk = buf[0].b;
  float* sc = reinterpret_cast<float*>(buf[pack_chunks].b);
  pack_acts<T>(nb, static_cast<const uint8_t*>(a), astride, nr, pk);
  const auto* wp = static_cast<const uint8_t*>(w);
  switch (nr) {
    case 1: return tile_nr<T, 1>(nb, wp, wstride, mr, pk, sc, y, ldy);
    case 2: return tile_nr<T, 2>(nb, wp, wstride, mr, pk, sc, y, ldy);
    case 3: return tile_nr<T, 3>(nb, wp, wstride, mr, pk, sc, y, ldy);
    case 4: return tile_nr<T, 4>(nb, wp, wstride, mr, pk, sc, y, ldy);
    case 5: return tile_nr<T, 5>(nb, wp, wstride, mr, pk, sc, y, ldy);
    case 6: return tile_nr<T, 6>(nb, wp, wstride, mr, pk, sc, y, ldy);
    case 7: return tile_nr<T, 7>(nb, wp, wstride, mr, pk, sc, y, ldy);
    default: return tile_nr<T, 8>(nb, wp, wstride, mr, pk, sc, y, ldy);
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
