// The AMX-BF16 tile kernel of amx_product.h: per 32 tokens, four fp32
// accumulator tiles (2 x 16 weight rows by 2 x 16 tokens), over K 32
// elements a step: two weight tiles loaded from the panel (rows 2K bytes
// apart), two activation tiles (1 KiB each, packed), four TDPBF16PS. The
// accumulators go through a small buffer into y, transposed (y is tokens by
// rows; the tiles are rows by tokens).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/cpu/amx_product.h"
#include "backend/cpu/ops_simd.h"  // <immintrin.h> with GCC's warnings tamed

namespace weir::cpu {

namespace {

// LDTILECFG's 64-byte operand: palette 1, then per tile its bytes a row and
// its rows.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

}  // namespace

__attribute__((target("amx-tile,amx-bf16"))) void amx_panel_product(const uint16_t* panel, int64_t K,
                                                                     const uint16_t* packed, int64_t T, int64_t rows,
                                                                     float* y, size_t ldy) {
  TileConfig cfg;
  for (int i = 0; i < 8; ++i) {
    cfg.colsb[i] = 64;
    cfg.rows[i] = 16;
  }
  _tile_loadconfig(&cfg);
  const int64_t steps = K / 32;
  const size_t astride = size_t(K) * sizeof(uint16_t);
  const uint16_t* a1 = panel + 16 * K;
  alignas(64) float c[4][16][16];
  for (int64_t t0 = 0; t0 < T; t0 += kAmxTokenPad) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    const uint16_t* b0 = packed + (t0 / 16) * steps * 512;
    const uint16_t* b1 = b0 + steps * 512;
    for (int64_t s = 0; s < steps; ++s) {
      _tile_loadd(4, panel + s * 32, astride);
      _tile_loadd(5, a1 + s * 32, astride);
      _tile_loadd(6, b0 + s * 512, 64);
      _tile_loadd(7, b1 + s * 512, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c[0], 64);
    _tile_stored(1, c[1], 64);
    _tile_stored(2, c[2], 64);
    _tile_stored(3, c[3], 64);
    // Tile q holds weight rows 16 (q / 2) + n by tokens t0 + 16 (q % 2) + j.
    for (int q = 0; q < 4; ++q) {
      const int64_t nb = 16 * (q / 2), tb = t0 + 16 * (q % 2);
      const int64_t nn = std::min<int64_t>(16, rows - nb), tt = std::min<int64_t>(16, T - tb);
      for (int64_t j = 0; j < tt; ++j)
        for (int64_t n = 0; n < nn; ++n) y[size_t(tb + j) * ldy + size_t(nb + n)] = c[q][n][j];
    }
  }
  _tile_release();
}

}  // namespace weir::cpu
