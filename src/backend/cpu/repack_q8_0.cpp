// The q8_0x8 layout (repack.h): its records and the reference product; the
// SIMD kernels are in repack_q8_0_simd.cpp.
#include <cmath>
#include <cstring>

#include "backend/cpu/repack.h"
#include "backend/cpu/repack_layout.h"
#include "core/half.h"
#include "core/quant/block_formats.h"

namespace weir::cpu {

namespace {

using namespace q8_0x8;
using quant::BlockQ8_0;
using quant::kQK;
using quant::load_block;

void reference_q8_0x8(int64_t K, const uint8_t* groups, size_t group_bytes, int n_groups, const void* a,
                      size_t astride, int nr, float* y, size_t ldy) {
  const int64_t nb = K / kQK;
  for (int g = 0; g < n_groups; ++g)
    for (int r = 0; r < kRepackRows; ++r)
      for (int j = 0; j < nr; ++j) {
        const uint8_t* arow = static_cast<const uint8_t*>(a) + size_t(j) * astride;
        float acc = 0.0f;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* rec = groups + size_t(g) * group_bytes + size_t(b) * kRecordBytes;
          const auto ab = load_block<BlockQ8_0>(arow, b);
          int32_t isum = 0;
          for (int i = 0; i < kQK; ++i) isum += int8_t(rec[kQs + 32 * (i / 4) + 4 * r + i % 4]) * ab.qs[i];
          uint16_t dh;
          std::memcpy(&dh, rec + kD + 2 * r, 2);
          acc = std::fma(float(isum), fp16_to_f32(dh) * fp16_to_f32(ab.d), acc);
        }
        y[size_t(j) * ldy + size_t(g) * kRepackRows + size_t(r)] = acc;
      }
}

// Record of block b: the 8 scales, then each 4-byte chunk of the 8 rows'
// quants side by side.
void pack_q8_0x8(const uint8_t* const rows[kRepackRows], int64_t b, uint8_t* rec) {
  for (int r = 0; r < kRepackRows; ++r) {
    if (!rows[r]) continue;  // padding: left zero
    const uint8_t* blk = rows[r] + size_t(b) * sizeof(BlockQ8_0);
    std::memcpy(rec + kD + 2 * r, blk + offsetof(BlockQ8_0, d), 2);
    for (int c = 0; c < 8; ++c) std::memcpy(rec + kQs + 32 * c + 4 * r, blk + offsetof(BlockQ8_0, qs) + 4 * c, 4);
  }
}

}  // namespace

const RepackLayout& q8_0x8_layout() {
  static const RepackLayout l{kQK, kRecordBytes, pack_q8_0x8, reference_q8_0x8, repack_simd::q8_0x8_tile_avx2,
                              repack_simd::q8_0x8_tile_avx512_vnni};
  return l;
}

}  // namespace weir::cpu
