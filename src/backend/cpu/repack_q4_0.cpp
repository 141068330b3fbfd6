// The q4_0x8 layout (repack.h): its records and the reference product; the
// SIMD kernels are in repack_q4_0_simd.cpp.
#include <cmath>
#include <cstring>

#include "backend/cpu/repack.h"
#include "backend/cpu/repack_layout.h"
#include "core/half.h"
#include "core/quant/block_formats.h"

namespace weir::cpu {

namespace {

using quant::BlockQ4_0;
using quant::BlockQ8_0;
using quant::kQK;

constexpr size_t kRecordBytes = 16 + 128;  // 8 scales, 4 chunks of 32 nibble bytes

void reference_q4_0x8(int64_t K, const uint8_t* groups, size_t group_bytes, int n_groups, const void* a,
                      size_t astride, int nr, float* y, size_t ldy) {
  const int64_t nb = K / kQK;
  for (int g = 0; g < n_groups; ++g)
    for (int r = 0; r < kRepackRows; ++r)
      for (int j = 0; j < nr; ++j) {
        const auto* ab = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(a) + size_t(j) * astride);
        float acc = 0.0f;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* rec = groups + size_t(g) * group_bytes + size_t(b) * kRecordBytes;
          uint16_t dh;
          std::memcpy(&dh, rec + 2 * r, 2);
          int32_t isum = 0;
          for (int i = 0; i < kQK; ++i) isum -= 8 * ab[b].qs[i];
          for (int c = 0; c < 4; ++c)
            for (int k = 0; k < 4; ++k) {
              const uint8_t q = rec[16 + 32 * c + 4 * r + k];
              isum += int32_t(q & 15) * ab[b].qs[4 * c + k] + int32_t(q >> 4) * ab[b].qs[16 + 4 * c + k];
            }
          const float s = fp16_to_f32(dh) * fp16_to_f32(ab[b].d);
          acc = std::fma(float(isum), s, acc);
        }
        y[size_t(j) * ldy + size_t(g) * kRepackRows + size_t(r)] = acc;
      }
}

// Record of block b: the 8 scales, then each 4-byte chunk of the 8 rows'
// nibbles side by side.
void pack_q4_0x8(const uint8_t* const rows[kRepackRows], int64_t b, uint8_t* rec) {
  for (int r = 0; r < kRepackRows; ++r) {
    if (!rows[r]) continue;  // padding: left zero
    const auto* blk = reinterpret_cast<const BlockQ4_0*>(rows[r]) + b;
    std::memcpy(rec + 2 * r, &blk->d, 2);
    for (int c = 0; c < 4; ++c) std::memcpy(rec + 16 + 32 * c + 4 * r, blk->qs + 4 * c, 4);
  }
}

}  // namespace

const RepackLayout& q4_0x8_layout() {
  static const RepackLayout l{kQK, kRecordBytes, pack_q4_0x8, reference_q4_0x8, repack_simd::q4_0x8_tile_avx2,
                              repack_simd::q4_0x8_tile_avx512_vnni};
  return l;
}

}  // namespace weir::cpu
