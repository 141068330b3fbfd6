// The q5_0x8 layout (repack.h): its records and the reference product; the
// SIMD kernels are in repack_q5_0_simd.cpp.
#include <cmath>
#include <cstring>

#include "backend/cpu/repack.h"
#include "backend/cpu/repack_layout.h"
#include "core/half.h"
#include "core/quant/block_formats.h"

namespace weir::cpu {

namespace {

using namespace q5_0x8;
using quant::BlockQ5_0;
using quant::BlockQ8_0;
using quant::kQK;

// Element of a block in byte k of nibble vector v (v < 4: chunk v's low
// nibbles, elements 4v..4v+3; else chunk v - 4's high nibbles, 16 on).
constexpr int element(int v, int k) { return v < 4 ? 4 * v + k : 16 + 4 * (v - 4) + k; }

void reference_q5_0x8(int64_t K, const uint8_t* groups, size_t group_bytes, int n_groups, const void* a,
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
          std::memcpy(&dh, rec + kD + 2 * r, 2);
          int32_t isum = 0;
          for (int i = 0; i < kQK; ++i) isum -= 16 * ab[b].qs[i];
          for (int v = 0; v < 8; ++v)
            for (int k = 0; k < 4; ++k) {
              const uint8_t byte = rec[kQs + 32 * (v % 4) + 4 * r + k];
              const int q = (v < 4 ? byte & 15 : byte >> 4) | ((rec[kQh + 4 * r + k] >> v) & 1) << 4;
              isum += q * ab[b].qs[element(v, k)];
            }
          const float s = fp16_to_f32(dh) * fp16_to_f32(ab[b].d);
          acc = std::fma(float(isum), s, acc);
        }
        y[size_t(j) * ldy + size_t(g) * kRepackRows + size_t(r)] = acc;
      }
}

// Record of block b: the 8 scales, each row's 32 fifth bits regrouped (bit
// v of its byte k: element(v, k)), then the nibbles as q4_0x8's.
void pack_q5_0x8(const uint8_t* const rows[kRepackRows], int64_t b, uint8_t* rec) {
  for (int r = 0; r < kRepackRows; ++r) {
    if (!rows[r]) continue;  // padding: left zero
    const auto blk = quant::load_block<BlockQ5_0>(rows[r], b);
    std::memcpy(rec + kD + 2 * r, &blk.d, 2);
    uint32_t qh;
    std::memcpy(&qh, blk.qh, 4);
    for (int k = 0; k < 4; ++k) {
      uint8_t byte = 0;
      for (int v = 0; v < 8; ++v) byte = uint8_t(byte | ((qh >> element(v, k)) & 1) << v);
      rec[kQh + 4 * r + k] = byte;
    }
    for (int c = 0; c < 4; ++c) std::memcpy(rec + kQs + 32 * c + 4 * r, blk.qs + 4 * c, 4);
  }
}

}  // namespace

const RepackLayout& q5_0x8_layout() {
  static const RepackLayout l{kQK, kRecordBytes, pack_q5_0x8, reference_q5_0x8, repack_simd::q5_0x8_tile_avx2,
                              repack_simd::q5_0x8_tile_avx512_vnni};
  return l;
}

}  // namespace weir::cpu
