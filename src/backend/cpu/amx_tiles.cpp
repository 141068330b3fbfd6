// The AMX-BF16 tile kernel of amx_product.h: per 32 tokens and panel, four
// fp32 accumulator tiles (2 x 16 weight rows by 2 x 16 tokens) loaded from
// the accumulators (or zeroed), then over the K block 32 elements a step:
// two weight tiles from the panel (contiguous, 1 KiB each), two activation
// tiles (1 KiB each, packed), four TDPBF16PS, the loads between the
// products; the tiles of a later step asked of L1 (amx_prefetch_steps);
// stored back.
#include <algorithm>
#include <atomic>
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

namespace {
std::atomic<int> g_prefetch_steps{0};
}  // namespace

void set_amx_prefetch_steps(int steps) { g_prefetch_steps.store(steps < 0 ? 0 : steps, std::memory_order_relaxed); }
int amx_prefetch_steps() { return g_prefetch_steps.load(std::memory_order_relaxed); }

__attribute__((target("amx-tile,amx-bf16"))) void amx_accumulate(const uint16_t* const* panels, int np, int64_t kb,
                                                                  const uint16_t* packed, int64_t steps, int64_t s0,
                                                                  int64_t T, float* const* c, bool zero) {
  TileConfig cfg;
  for (int i = 0; i < 8; ++i) {
    cfg.colsb[i] = 64;
    cfg.rows[i] = 16;
  }
  _tile_loadconfig(&cfg);
  const int64_t n_steps = kb / 32;
  const int64_t ahead = amx_prefetch_steps();
  for (int64_t t0 = 0; t0 < T; t0 += kAmxTokenPad) {
    const uint16_t* b0 = packed + ((t0 / 16) * steps + s0) * 512;
    const uint16_t* b1 = b0 + steps * 512;
    for (int p = 0; p < np; ++p) {
      float* cp = c[p] + (t0 / 32) * 1024;
      if (zero) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      } else {
        _tile_loadd(0, cp, 64);
        _tile_loadd(1, cp + 256, 64);
        _tile_loadd(2, cp + 512, 64);
        _tile_loadd(3, cp + 768, 64);
      }
      const uint16_t* a = panels[p];  // step s: its two tiles at a + 1024 s
      for (int64_t s = 0; s < n_steps; ++s) {
        if (ahead) {  // step s + ahead's four tiles into L1 (integer addresses: past the end is harmless)
          const uintptr_t pa = reinterpret_cast<uintptr_t>(a + (s + ahead) * 1024);
          const uintptr_t pb0 = reinterpret_cast<uintptr_t>(b0 + (s + ahead) * 512);
          const uintptr_t pb1 = reinterpret_cast<uintptr_t>(b1 + (s + ahead) * 512);
          for (int l = 0; l < 1024; l += 64) {
            _mm_prefetch(reinterpret_cast<const char*>(pa + l), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(pa + 1024 + l), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(pb0 + l), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(pb1 + l), _MM_HINT_T0);
          }
        }
        // Loads between the products (a tile is reloaded only after the
        // products reading it were issued): tile registers are not renamed,
        // so four loads first would wait for all four products of the last
        // step.
        _tile_loadd(4, a + s * 1024, 64);
        _tile_loadd(6, b0 + s * 512, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(7, b1 + s * 512, 64);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(5, a + s * 1024 + 512, 64);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      // Tile q: weight rows 16 (q / 2) + n by tokens t0 + 16 (q % 2) + j.
      _tile_stored(0, cp, 64);
      _tile_stored(1, cp + 256, 64);
      _tile_stored(2, cp + 512, 64);
      _tile_stored(3, cp + 768, 64);
    }
  }
  _tile_release();
}

}  // namespace weir::cpu
