// The q5_Kx8 layout (repack.h): its records and the reference product; the
// SIMD kernels are in repack_q5_k_simd.cpp.
#include <cmath>
#include <cstring>

#include "backend/cpu/repack.h"
#include "backend/cpu/repack_layout.h"
#include "core/half.h"
#include "core/quant/block_formats.h"

namespace weir::cpu {

namespace {

using namespace q5_kx8;
using quant::BlockQ5_K;
using quant::BlockQ8_K;
using quant::kQK_K;
using quant::load_block;

// Quant i (0..31) of sub-block sub of row r in a record: its nibble (as
// q4_Kx8's) and bit sub of its qh byte above it.
int quant5(const uint8_t* rec, int r, int sub, int i) {
  const uint8_t byte = rec[kQs + 256 * (sub / 2) + 32 * (i / 4) + 4 * r + i % 4];
  const uint8_t high = rec[kQh + 32 * (i / 4) + 4 * r + i % 4];
  return (sub % 2 ? byte >> 4 : byte & 15) | ((high >> sub) & 1) << 4;
}

void reference_q5_kx8(int64_t K, const uint8_t* groups, size_t group_bytes, int n_groups, const void* a,
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
          int32_t isum = 0, msum = 0;
          for (int sub = 0; sub < 8; ++sub) {
            int32_t dot = 0;
            for (int i = 0; i < 32; ++i) dot += quant5(rec, r, sub, i) * ab.qs[32 * sub + i];
            isum += rec[kScales + 8 * sub + r] * dot;
            msum += rec[kMins + 8 * sub + r] * (ab.bsums[2 * sub] + ab.bsums[2 * sub + 1]);
          }
          uint16_t dh, mh;
          std::memcpy(&dh, rec + kD + 2 * r, 2);
          std::memcpy(&mh, rec + kDmin + 2 * r, 2);
          acc = std::fma(float(isum), fp16_to_f32(dh) * ab.d, acc);
          acc = std::fma(float(msum), fp16_to_f32(mh) * -ab.d, acc);
        }
        y[size_t(j) * ldy + size_t(g) * kRepackRows + size_t(r)] = acc;
      }
}

// Record of super-block b: as q4_Kx8's, then the qh bytes 4 at a time, row
// after row.
void pack_q5_kx8(const uint8_t* const rows[kRepackRows], int64_t b, uint8_t* rec) {
  for (int r = 0; r < kRepackRows; ++r) {
    if (!rows[r]) continue;  // padding: left zero
    const auto blk = load_block<BlockQ5_K>(rows[r], b);
    std::memcpy(rec + kD + 2 * r, &blk.d, 2);
    std::memcpy(rec + kDmin + 2 * r, &blk.dmin, 2);
    for (int sub = 0; sub < 8; ++sub)
      quant::unpack_scale_min_k4(sub, blk.scales, &rec[kScales + 8 * sub + r], &rec[kMins + 8 * sub + r]);
    for (int p = 0; p < 4; ++p)
      for (int c = 0; c < 8; ++c) std::memcpy(rec + kQs + 256 * p + 32 * c + 4 * r, blk.qs + 32 * p + 4 * c, 4);
    for (int c = 0; c < 8; ++c) std::memcpy(rec + kQh + 32 * c + 4 * r, blk.qh + 4 * c, 4);
  }
}

}  // namespace

const RepackLayout& q5_kx8_layout() {
  static const RepackLayout l{kQK_K, kRecordBytes, pack_q5_kx8, reference_q5_kx8, repack_simd::q5_kx8_tile_avx2,
                              repack_simd::q5_kx8_tile_avx512_vnni};
  return l;
}

}  // namespace weir::cpu
