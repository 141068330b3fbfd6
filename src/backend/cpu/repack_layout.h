// What each repacked layout (repack.h) gives the generic code in
// repack.cpp: the size of its records, how one record is written from 8
// file rows, and its kernels. One record covers one block of K (32
// elements for Q4_0 / Q8_0, a 256-element super-block for the K-quants) of
// the group's 8 rows; a group is its K / block records one after another.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cpu/repack.h"

namespace weir::cpu {

struct RepackLayout {
  int64_t block = 0;        // elements a record covers
  size_t record_bytes = 0;  // bytes of one record (8 rows)
  // Writes the record of block b of 8 rows; rows[r] is row r's start in the
  // file, null for a padding row, whose bytes pack leaves alone (the caller
  // has zeroed the record: scale 0, so the row's products are 0).
  void (*pack)(const uint8_t* const rows[kRepackRows], int64_t b, uint8_t* rec) = nullptr;
  RepackedTileFn reference = nullptr, avx2 = nullptr, avx512_vnni = nullptr;
};

// The layouts, one a file (repack_<type>.cpp).
const RepackLayout& q4_0x8_layout();
const RepackLayout& q4_kx8_layout();
const RepackLayout& q5_0x8_layout();
const RepackLayout& q5_kx8_layout();
const RepackLayout& q6_kx8_layout();
const RepackLayout& q8_0x8_layout();

// Byte offsets in one record (the layouts are described in repack.h).
namespace q4_kx8 {
constexpr size_t kD = 0, kDmin = 16, kScales = 32, kMins = 96, kQs = 160, kRecordBytes = 1184;
}
namespace q5_0x8 {
constexpr size_t kD = 0, kQh = 16, kQs = 48, kRecordBytes = 176;
}
namespace q5_kx8 {
constexpr size_t kD = 0, kDmin = 16, kScales = 32, kMins = 96, kQs = 160, kQh = 1184, kRecordBytes = 1440;
}
namespace q6_kx8 {
constexpr size_t kD = 0, kScales = 16, kQl = 144, kQh = 1168, kRecordBytes = 1680;
}
namespace q8_0x8 {
constexpr size_t kD = 0, kQs = 16, kRecordBytes = 272;
}

// The SIMD kernels (repack_<type>_simd.cpp), RepackedTileFn's signature.
namespace repack_simd {
#define WEIR_REPACK_TILE(NAME)                                                                                     \
  void NAME(int64_t K, const uint8_t* groups, size_t group_bytes, int n_groups, const void* a, size_t astride, \
            int nr, float* y, size_t ldy)
WEIR_REPACK_TILE(q4_0x8_tile_avx2);
WEIR_REPACK_TILE(q4_0x8_tile_avx512_vnni);
WEIR_REPACK_TILE(q4_kx8_tile_avx2);
WEIR_REPACK_TILE(q4_kx8_tile_avx512_vnni);
WEIR_REPACK_TILE(q5_0x8_tile_avx2);
WEIR_REPACK_TILE(q5_0x8_tile_avx512_vnni);
WEIR_REPACK_TILE(q5_kx8_tile_avx2);
WEIR_REPACK_TILE(q5_kx8_tile_avx512_vnni);
WEIR_REPACK_TILE(q6_kx8_tile_avx2);
WEIR_REPACK_TILE(q6_kx8_tile_avx512_vnni);
WEIR_REPACK_TILE(q8_0x8_tile_avx2);
WEIR_REPACK_TILE(q8_0x8_tile_avx512_vnni);
#undef WEIR_REPACK_TILE
}  // namespace repack_simd

}  // namespace weir::cpu
