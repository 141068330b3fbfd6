// The q6_Kx8 layout (repack.h): its records and the reference product; the
// SIMD kernels are in repack_q6_k_simd.cpp.
#include <cmath>
#include <cstring>

#include "backend/cpu/repack.h"
#include "backend/cpu/repack_layout.h"
#include "core/half.h"
#include "core/quant/block_formats.h"

namespace weir::cpu {

namespace {

using namespace q6_kx8;
using quant::BlockQ6_K;
using quant::BlockQ8_K;
using quant::kQK_K;
using quant::load_block;

// The 6-bit quant (0..63) of element i of row r in a record.
int quant6(const uint8_t* rec, int r, int i) {
  const int h = i / 128, s = (i / 32) % 4, c = (i % 32) / 4, k = i % 4;
  const int lo = (rec[kQl + 256 * (2 * h + s % 2) + 32 * c + 4 * r + k] >> (4 * (s / 2))) & 15;
  const int hi = (rec[kQh + 256 * h + 32 * c + 4 * r + k] >> (2 * s)) & 3;
  return lo | hi << 4;
}

void reference_q6_kx8(int64_t K, const uint8_t* groups, size_t group_bytes, int n_groups, const void* a,
                      size_t astride, int nr, float* y, size_t ldy) {
  const int64_t nb = K / kQK_K;
  for (int g = 0; g < n_groups; ++g)
    for (int r = 0; r < kRepackRows; ++r)
      for (int j = 0; j < nr; ++j) {
        const uint8_t* arow = static_cast<const uint8_t*>(a) + size_t(j) * astride;
        float acc = 0.0f;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* rec = groups + size_t(g) * group_bytes + size_t(b) * kRecordBytes;
          const auto ab = load_block<BlockQ8_K>(arow, b);
          int32_t isum = 0;
          for (int sub = 0; sub < 16; ++sub) {
            int32_t dot = -32 * ab.bsums[sub];  // the quants' offset: q - 32
            for (int i = 16 * sub; i < 16 * sub + 16; ++i) dot += quant6(rec, r, i) * ab.qs[i];
            isum += int8_t(rec[kScales + 8 * sub + r]) * dot;
          }
          uint16_t dh;
          std::memcpy(&dh, rec + kD + 2 * r, 2);
          acc = std::fma(float(isum), fp16_to_f32(dh) * ab.d, acc);
        }
        y[size_t(j) * ldy + size_t(g) * kRepackRows + size_t(r)] = acc;
      }
}

// Record of super-block b: the 8 rows' d and scales, then their ql and qh
// bytes 4 at a time, row after row.
void pack_q6_kx8(const uint8_t* const rows[kRepackRows], int64_t b, uint8_t* rec) {
  for (int r = 0; r < kRepackRows; ++r) {
    if (!rows[r]) continue;  // padding: left zero
    const auto blk = load_block<BlockQ6_K>(rows[r], b);
    std::memcpy(rec + kD + 2 * r, &blk.d, 2);
    for (int sub = 0; sub < 16; ++sub) rec[kScales + 8 * sub + r] = uint8_t(blk.scales[sub]);
    for (int h = 0; h < 2; ++h)
      for (int c = 0; c < 8; ++c) {
        for (int s1 = 0; s1 < 2; ++s1)
          std::memcpy(rec + kQl + 256 * (2 * h + s1) + 32 * c + 4 * r, blk.ql + 64 * h + 32 * s1 + 4 * c, 4);
        std::memcpy(rec + kQh + 256 * h + 32 * c + 4 * r, blk.qh + 32 * h + 4 * c, 4);
      }
  }
}

}  // namespace

const RepackLayout& q6_kx8_layout() {
  static const RepackLayout l{kQK_K, kRecordBytes, pack_q6_kx8, reference_q6_kx8, repack_simd::q6_kx8_tile_avx2,
                              repack_simd::q6_kx8_tile_avx512_vnni};
  return l;
}

}  // namespace weir::cpu
