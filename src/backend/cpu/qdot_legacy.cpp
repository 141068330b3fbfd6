// Reference integer dot kernels for the 32-element block types against
// Q8_0 activations, and the table of kernels per SIMD level (qdot_legacy.h).
//
// The reference follows the SIMD kernels' float order exactly (qdot.h):
// 8 lanes, lane l holding the integer sum of elements 4l..4l+3 of a block,
// one fused multiply-add per block into each lane, then the horizontal sum
// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). The integer sums are exact, so
// every level gives the same bits and the tests compare them exactly.
//
// Q4_1 / Q5_1 have a min term: llama.cpp pairs them with Q8_1 activations,
// whose s = fp16(d * sum of quants) is summed over blocks in a separate
// float and added after the horizontal sum. Here the sum comes from the Q8_0
// block; d is the block's stored fp16 scale where llama.cpp uses the
// unrounded one, so the min term can differ from llama.cpp's in the last
// bits of s.
#include <cmath>
#include <cstring>

#include "backend/cpu/qdot_legacy.h"
#include "backend/cpu/qdot_legacy_impl.h"
#include "core/half.h"
#include "core/quant/block_formats.h"

namespace weir::cpu {
namespace {

using namespace quant;

// One weight block as signed (types _0) or unsigned (types _1) integers.
struct Unpacked {
  int8_t q[kQK];
  float d = 0.0f, m = 0.0f;
};

inline void nibbles(const uint8_t* qs, int8_t* q) {
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = int8_t(qs[j] & 15);
    q[j + 16] = int8_t(qs[j] >> 4);
  }
}
inline uint32_t high_bits(const uint8_t* qh) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return h;
}

template <DType T>
struct Block;
template <>
struct Block<DType::Q4_0> {
  using B = BlockQ4_0;
  static void unpack(const B& b, Unpacked* u) {
    nibbles(b.qs, u->q);
    for (int8_t& v : u->q) v = int8_t(v - 8);
    u->d = fp16_to_f32(b.d);
  }
};
template <>
struct Block<DType::Q4_1> {
  using B = BlockQ4_1;
  static void unpack(const B& b, Unpacked* u) {
    nibbles(b.qs, u->q);
    u->d = fp16_to_f32(b.d);
    u->m = fp16_to_f32(b.m);
  }
};
template <>
struct Block<DType::Q5_0> {
  using B = BlockQ5_0;
  static void unpack(const B& b, Unpacked* u) {
    nibbles(b.qs, u->q);
    const uint32_t h = high_bits(b.qh);
    for (int j = 0; j < kQK; ++j) u->q[j] = int8_t(u->q[j] + int((h >> j) & 1) * 16 - 16);
    u->d = fp16_to_f32(b.d);
  }
};
template <>
struct Block<DType::Q5_1> {
  using B = BlockQ5_1;
  static void unpack(const B& b, Unpacked* u) {
    nibbles(b.qs, u->q);
    const uint32_t h = high_bits(b.qh);
    for (int j = 0; j < kQK; ++j) u->q[j] = int8_t(u->q[j] + int((h >> j) & 1) * 16);
    u->d = fp16_to_f32(b.d);
    u->m = fp16_to_f32(b.m);
  }
};
template <>
struct Block<DType::Q8_0> {
  using B = BlockQ8_0;
  static void unpack(const B& b, Unpacked* u) {
    std::memcpy(u->q, b.qs, kQK);
    u->d = fp16_to_f32(b.d);
  }
};

constexpr bool has_min(DType t) { return t == DType::Q4_1 || t == DType::Q5_1; }

inline float hsum8(const float* a) {
  const float s0 = a[0] + a[4], s1 = a[1] + a[5], s2 = a[2] + a[6], s3 = a[3] + a[7];
  return (s0 + s2) + (s1 + s3);
}

template <DType T>
float dot_ref(int64_t n, const void* w, const void* a) {
  using B = typename Block<T>::B;
  float acc[8] = {};
  float summs = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    Unpacked u;
    Block<T>::unpack(load_block<B>(w, b), &u);
    const BlockQ8_0 ab = load_block<BlockQ8_0>(a, b);
    const float da = fp16_to_f32(ab.d);
    const float d = u.d * da;
    for (int l = 0; l < 8; ++l) {
      int s = 0;
      for (int k = 4 * l; k < 4 * l + 4; ++k) s += int(u.q[k]) * int(ab.qs[k]);
      acc[l] = std::fma(d, float(s), acc[l]);
    }
    if constexpr (has_min(T)) {
      int sa = 0;
      for (int k = 0; k < kQK; ++k) sa += ab.qs[k];
      summs += u.m * fp16_to_f32(f32_to_fp16(da * float(sa)));
    }
  }
  if constexpr (has_min(T)) return hsum8(acc) + summs;
  return hsum8(acc);
}

template <DType T>
void tile_ref(int64_t n, const void* w, size_t wstride, int mr, const void* a, size_t astride, int nr,
              float* y, size_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* abase = static_cast<const uint8_t*>(a);
  for (int j = 0; j < nr; ++j)
    for (int i = 0; i < mr; ++i) y[j * ldy + i] = dot_ref<T>(n, wb + i * wstride, abase + j * astride);
}

template <DType T>
QDotKernels ref_kernels() {
  return {dot_ref<T>, tile_ref<T>};
}

}  // namespace

QDotKernels qdot_legacy_kernels(DType w, SimdLevel level) {
  switch (level) {
    case SimdLevel::AVX512_VNNI: return legacy::avx512_vnni_kernels(w);
    case SimdLevel::AVX512: return legacy::avx512_kernels(w);
    case SimdLevel::AVX2: return legacy::avx2_kernels(w);
    case SimdLevel::Reference: break;
  }
  switch (w) {
    case DType::Q4_0: return ref_kernels<DType::Q4_0>();
    case DType::Q4_1: return ref_kernels<DType::Q4_1>();
    case DType::Q5_0: return ref_kernels<DType::Q5_0>();
    case DType::Q5_1: return ref_kernels<DType::Q5_1>();
    case DType::Q8_0: return ref_kernels<DType::Q8_0>();
    default: return {};
  }
}

}  // namespace weir::cpu
