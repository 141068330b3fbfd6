// The q5_Kx8 layout (repack.h): its records and the reference product; the
// SIMD kernels are in repack_q5_k_simd.cpp.
#include <cstring>

#include "backend/cpu/repack.h"
#include "backend/cpu/repack_kmin.h"
#include "backend/cpu/repack_layout.h"
#include "core/quant/block_formats.h"

namespace weir::cpu {

namespace {

using namespace q5_kx8;
using quant::BlockQ5_K;
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
  kmin_x8::reference(K, groups, group_bytes, n_groups, a, astride, nr, y, ldy, kRecordBytes, quant5);
}

// Record of super-block b: as q4_Kx8's, then the qh bytes 4 at a time, row
// after row.
void pack_q5_kx8(const uint8_t* const rows[kRepackRows], int64_t b, uint8_t* rec) {
  for (int r = 0; r < kRepackRows; ++r) {
    if (!rows[r]) continue;  // padding: left zero
    const auto blk = load_block<BlockQ5_K>(rows[r], b);
    kmin_x8::pack_shared(blk, r, rec);
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
