// The q4_Kx8 layout (repack.h): its records and the reference product; the
// SIMD kernels are in repack_q4_k_simd.cpp.
#include "backend/cpu/repack.h"
#include "backend/cpu/repack_kmin.h"
#include "backend/cpu/repack_layout.h"
#include "core/quant/block_formats.h"

namespace weir::cpu {

namespace {

using namespace q4_kx8;
using quant::BlockQ4_K;
using quant::kQK_K;
using quant::load_block;

// Nibble i (0..31) of sub-block sub of row r in a record.
int nibble(const uint8_t* rec, int r, int sub, int i) {
  const uint8_t byte = rec[kQs + 256 * (sub / 2) + 32 * (i / 4) + 4 * r + i % 4];
  return sub % 2 ? byte >> 4 : byte & 15;
}

void reference_q4_kx8(int64_t K, const uint8_t* groups, size_t group_bytes, int n_groups, const void* a,
                      size_t astride, int nr, float* y, size_t ldy) {
  kmin_x8::reference(K, groups, group_bytes, n_groups, a, astride, nr, y, ldy, kRecordBytes, nibble);
}

// Record of super-block b: the 8 rows' d, dmin, unpacked scales and mins,
// then the nibble bytes 4 at a time, row after row.
void pack_q4_kx8(const uint8_t* const rows[kRepackRows], int64_t b, uint8_t* rec) {
  for (int r = 0; r < kRepackRows; ++r) {
    if (!rows[r]) continue;  // padding: left zero
    const auto blk = load_block<BlockQ4_K>(rows[r], b);
    kmin_x8::pack_shared(blk, r, rec);
  }
}

}  // namespace

const RepackLayout& q4_kx8_layout() {
  static const RepackLayout l{kQK_K, kRecordBytes, pack_q4_kx8, reference_q4_kx8, repack_simd::q4_kx8_tile_avx2,
                              repack_simd::q4_kx8_tile_avx512_vnni};
  return l;
}

}  // namespace weir::cpu
