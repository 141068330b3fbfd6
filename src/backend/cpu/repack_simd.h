// What the repacked layouts' SIMD kernels (repack_<type>_simd.cpp) share:
// the 4-byte activation load and the loop over groups and tokens.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

namespace weir::cpu::repack_simd {

// 4 activation quants as one int32 (to broadcast).
inline int32_t load4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace weir::cpu::repack_simd

// Defines the RepackedTileFn NAME: the activations' per-block values made
// once a call (t_act.fill, a thread_local of the kernel's file), then each
// group met by the tokens TOKENS at a time through NAME##_group<TN>(nb,
// group, t_act, first token, y of the group, ldy), TN = 1..TOKENS.
#define WEIR_REPACK_TILE_LOOP(NAME, TARGET, TOKENS, BLOCK)                                                  \
  __attribute__((target(TARGET))) void NAME(int64_t K, const uint8_t* groups, size_t group_bytes, int n_groups, \
                                            const void* a, size_t astride, int nr, float* y, size_t ldy) {    \
    const int64_t nb = K / (BLOCK);                                                                        \
    t_act.fill(a, astride, nr, nb);                                                                        \
    for (int g = 0; g < n_groups; ++g) {                                                                   \
      const uint8_t* gp = groups + size_t(g) * group_bytes;                                                \
      float* yg = y + size_t(g) * kRepackRows;                                                             \
      for (int j0 = 0; j0 < nr; j0 += (TOKENS)) {                                                          \
        switch (std::min((TOKENS), nr - j0)) {                                                             \
          case 1: NAME##_group<1>(nb, gp, t_act, j0, yg, ldy); break;                                      \
          case 2: NAME##_group<2>(nb, gp, t_act, j0, yg, ldy); break;                                      \
          case 3: NAME##_group<3>(nb, gp, t_act, j0, yg, ldy); break;                                      \
          case 4: NAME##_group<4>(nb, gp, t_act, j0, yg, ldy); break;                                      \
          case 5: NAME##_group<5>(nb, gp, t_act, j0, yg, ldy); break;                                      \
          case 6: NAME##_group<6>(nb, gp, t_act, j0, yg, ldy); break;                                      \
          case 7: NAME##_group<7>(nb, gp, t_act, j0, yg, ldy); break;                                      \
          default: NAME##_group<8>(nb, gp, t_act, j0, yg, ldy); break;                                     \
        }                                                                                                  \
      }                                                                                                    \
    }                                                                                                      \
  }
