// The repacked layouts' common part (repack.h): which types have one, the
// group size, the rewriting of file rows (the last group padded with zero
// rows, never reading past row N) and the choice of kernel by SIMD level.
// Each type's record and kernels are in repack_<type>.cpp.
#include <cstring>
#include <string>

#include "backend/cpu/repack.h"
#include "backend/cpu/repack_layout.h"
#include "core/error.h"

namespace weir::cpu {

namespace {

// The layout of type t, null when it has none.
const RepackLayout* layout_of(DType t) {
  switch (t) {
    case DType::Q4_0: return &q4_0x8_layout();
    case DType::Q4_K: return &q4_kx8_layout();
    case DType::Q5_0: return &q5_0x8_layout();
    case DType::Q5_K: return &q5_kx8_layout();
    case DType::Q6_K: return &q6_kx8_layout();
    case DType::Q8_0: return &q8_0x8_layout();
    default: return nullptr;
  }
}

const RepackLayout& layout_for(DType t, int64_t K) {
  const RepackLayout* l = layout_of(t);
  if (!l || K <= 0 || K % l->block != 0)
    throw Error(std::string("repack: no layout for ") + dtype_name(t) + " rows of " + std::to_string(K));
  return *l;
}

}  // namespace

bool can_repack(DType t, int64_t K) {
  const RepackLayout* l = layout_of(t);
  return l && K > 0 && K % l->block == 0;
}

size_t repacked_group_bytes(DType t, int64_t K) {
  const RepackLayout& l = layout_for(t, K);
  return size_t(K / l.block) * l.record_bytes;
}

void repack_groups(DType t, const uint8_t* w, size_t wstride, int64_t K, int64_t N, int64_t g0, int64_t g1,
                   uint8_t* out) {
  const RepackLayout& l = layout_for(t, K);
  const int64_t nb = K / l.block;
  const size_t gb = size_t(nb) * l.record_bytes;
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* rows[kRepackRows];
    for (int r = 0; r < kRepackRows; ++r) {
      const int64_t n = g * kRepackRows + r;
      rows[r] = n < N ? w + size_t(n) * wstride : nullptr;
    }
    uint8_t* dst = out + size_t(g - g0) * gb;
    if (!rows[kRepackRows - 1]) std::memset(dst, 0, gb);  // padding rows: zeros
    for (int64_t b = 0; b < nb; ++b) l.pack(rows, b, dst + size_t(b) * l.record_bytes);
  }
}

void repacked_tile_reference(DType t, int64_t K, const uint8_t* groups, size_t group_bytes, int n_groups,
                             const void* a, size_t astride, int nr, float* y, size_t ldy) {
  layout_for(t, K).reference(K, groups, group_bytes, n_groups, a, astride, nr, y, ldy);
}

RepackedTileFn repacked_tile(DType t, SimdLevel level) {
  const RepackLayout* l = layout_of(t);
  if (!l) return nullptr;
  if (int(level) > int(hardware_simd_level())) level = hardware_simd_level();
  if (level == SimdLevel::AVX512_VNNI && l->avx512_vnni) return l->avx512_vnni;
  if (level != SimdLevel::Reference && l->avx2) return l->avx2;
  return l->reference;
}

}  // namespace weir::cpu
