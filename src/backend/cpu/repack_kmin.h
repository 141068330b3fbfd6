// The K-quants with mins, q4_Kx8 and q5_Kx8 (repack_layout.h): their
// records share the first q4_kx8::kRecordBytes bytes (the 8 rows' d, dmin,
// unpacked scales and mins, the nibbles), and q5_Kx8's add the high bits.
// The reference product and the packing of the shared bytes, written once;
// a type gives its quant accessor and its block.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/repack.h"
#include "backend/cpu/repack_layout.h"
#include "core/half.h"
#include "core/quant/block_formats.h"

namespace weir::cpu::kmin_x8 {

using namespace q4_kx8;
static_assert(q5_kx8::kD == kD && q5_kx8::kDmin == kDmin && q5_kx8::kScales == kScales && q5_kx8::kMins == kMins &&
                  q5_kx8::kQs == kQs,
              "q5_Kx8's record begins as q4_Kx8's");

// The reference product over records of record_bytes; quant(rec, r, sub, i):
// quant i (0..31) of sub-block sub of row r.
template <class Quant>
void reference(int64_t K, const uint8_t* groups, size_t group_bytes, int n_groups, const void* a, size_t astride,
               int nr, float* y, size_t ldy, size_t record_bytes, Quant quant) {
  const int64_t nb = K / quant::kQK_K;
  for (int g = 0; g < n_groups; ++g)
    for (int r = 0; r < kRepackRows; ++r)
      for (int j = 0; j < nr; ++j) {
        const uint8_t* arow = static_cast<const uint8_t*>(a) + size_t(j) * astride;
        float acc = 0.0f;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* rec = groups + size_t(g) * group_bytes + size_t(b) * record_bytes;
          const auto ab = quant::load_block<quant::BlockQ8_K>(arow, b);
          int32_t isum = 0, msum = 0;
          for (int sub = 0; sub < 8; ++sub) {
            int32_t dot = 0;
            for (int i = 0; i < 32; ++i) dot += quant(rec, r, sub, i) * ab.qs[32 * sub + i];
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

// Row r's share of the shared bytes from its block: d, dmin, the unpacked
// scales and mins, the nibble bytes 4 at a time, row after row.
template <class Block>
void pack_shared(const Block& blk, int r, uint8_t* rec) {
  std::memcpy(rec + kD + 2 * r, &blk.d, 2);
  std::memcpy(rec + kDmin + 2 * r, &blk.dmin, 2);
  for (int sub = 0; sub < 8; ++sub)
    quant::unpack_scale_min_k4(sub, blk.scales, &rec[kScales + 8 * sub + r], &rec[kMins + 8 * sub + r]);
  for (int p = 0; p < 4; ++p)
    for (int c = 0; c < 8; ++c) std::memcpy(rec + kQs + 256 * p + 32 * c + 4 * r, blk.qs + 32 * p + 4 * c, 4);
}

}  // namespace weir::cpu::kmin_x8
