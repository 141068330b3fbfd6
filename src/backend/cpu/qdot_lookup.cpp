// Reference integer dot kernels for the lookup types (qdot_lookup.h) and
// the table of kernels per SIMD level.
#include "backend/cpu/qdot_lookup.h"

#include <cmath>
#include <type_traits>

#include "core/half.h"
#include "core/quant/block_formats.h"

namespace weir::cpu {
namespace {

using namespace quant;

// The 32 values of a group of 32 nibble-packed quants (packed as in q4_0).
inline void lookup_group(const uint8_t* qs, const int8_t* table, int8_t* v) {
  for (int j = 0; j < kQK / 2; ++j) {
    v[j] = table[qs[j] & 15];
    v[j + kQK / 2] = table[qs[j] >> 4];
  }
}

// lanes[l] += scale * sum of w[k] * a[k] over k in 4l..4l+3 (exact).
inline void add_group_lanes(const int8_t* w, const int8_t* a, int scale, int* lanes) {
  for (int l = 0; l < 8; ++l) {
    int s = 0;
    for (int k = 4 * l; k < 4 * l + 4; ++k) s += int(w[k]) * int(a[k]);
    lanes[l] += scale * s;
  }
}

inline float lookup_hsum8(const float* a) {
  const float s0 = a[0] + a[4], s1 = a[1] + a[5], s2 = a[2] + a[6], s3 = a[3] + a[7];
  return (s0 + s2) + (s1 + s3);
}

inline void fma_lanes(float d, const int* lanes, float* acc) {
  for (int l = 0; l < 8; ++l) acc[l] = std::fma(d, float(lanes[l]), acc[l]);
}

// IQ4_NL or MXFP4 against Q8_0: one group of 32 per block.
template <DType T>
float dot_group32_ref(int64_t n, const void* w, const void* a) {
  using B = std::conditional_t<T == DType::IQ4_NL, BlockIQ4_NL, BlockMXFP4>;
  float acc[8] = {};
  for (int64_t b = 0; b < n / kQK; ++b) {
    const B wb = load_block<B>(w, b);
    const BlockQ8_0 ab = load_block<BlockQ8_0>(a, b);
    int8_t v[kQK];
    int lanes[8] = {};
    float dw;
    if constexpr (T == DType::IQ4_NL) {
      lookup_group(wb.qs, kIQ4NLValues, v);
      dw = fp16_to_f32(wb.d);
    } else {
      lookup_group(wb.qs, kMXFP4Values, v);
      dw = e8m0_to_f32_half(wb.e);
    }
    add_group_lanes(v, ab.qs, 1, lanes);
    fma_lanes(dw * fp16_to_f32(ab.d), lanes, acc);
  }
  return lookup_hsum8(acc);
}

// IQ4_XS against Q8_K: 8 groups of 32 per super-block, each with its scale.
float dot_iq4_xs_ref(int64_t n, const void* w, const void* a) {
  float acc[8] = {};
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockIQ4_XS wb = load_block<BlockIQ4_XS>(w, b);
    const BlockQ8_K ab = load_block<BlockQ8_K>(a, b);
    int lanes[8] = {};
    for (int j = 0; j < kQK_K / kQK; ++j) {
      int8_t v[kQK];
      lookup_group(wb.qs + j * (kQK / 2), kIQ4NLValues, v);
      add_group_lanes(v, ab.qs + j * kQK, iq4_xs_scale(wb, j), lanes);
    }
    fma_lanes(fp16_to_f32(wb.d) * ab.d, lanes, acc);
  }
  return lookup_hsum8(acc);
}

template <VecDotFn Dot>
void tile_ref(int64_t n, const void* w, size_t wstride, int mr, const void* a, size_t astride, int nr,
              float* y, size_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* abase = static_cast<const uint8_t*>(a);
  for (int j = 0; j < nr; ++j)
    for (int i = 0; i < mr; ++i) y[j * ldy + i] = Dot(n, wb + i * wstride, abase + j * astride);
}

}  // namespace

QDotKernels qdot_lookup_kernels(DType w, SimdLevel level) {
  if (level == SimdLevel::AVX2) return lookup::avx2_kernels(w);
  if (level != SimdLevel::Reference) return {};  // the dispatcher falls back to AVX2
  switch (w) {
    case DType::IQ4_NL:
      return {dot_group32_ref<DType::IQ4_NL>, tile_ref<dot_group32_ref<DType::IQ4_NL>>};
    case DType::MXFP4: return {dot_group32_ref<DType::MXFP4>, tile_ref<dot_group32_ref<DType::MXFP4>>};
    case DType::IQ4_XS: return {dot_iq4_xs_ref, tile_ref<dot_iq4_xs_ref>};
    default: return {};
  }
}

}  // namespace weir::cpu
