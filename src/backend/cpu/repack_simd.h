// What the repacked layouts' SIMD kernels (repack_<type>_simd.cpp) share:
// the 4-byte activation load, the weight prefetch and the loop over groups
// and tokens.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/cpu/ops_simd.h"  // <immintrin.h>
#include "backend/cpu/qdot.h"      // prefetch_plan

namespace weir::cpu::repack_simd {

// 4 activation quants as one int32 (to broadcast).
inline int32_t load4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Software prefetch of the weight stream. At decode the weights are read
// once from memory and the hardware prefetcher alone leaves a core short of
// its bandwidth: before each record, ask for the lines some bytes past it
// (repack_prefetch_plan; WEIR_PREFETCH=BYTES[,l1|l2|l3|nta] tunes it), one
// every 64 bytes of the record (a fixed count, no branches: a steady
// stream, each record's window meeting the next one's). A call's groups
// are contiguous, and so are the calls of a thread's rows, so the bytes
// past the group (or the call) are the next ones read. Addresses are
// computed as integers: a prefetch never faults, even past the end.
struct WeightPrefetch {
  uintptr_t ahead = 0;  // bytes past the record; 0: no prefetch
  int level = 0;        // PrefetchPlan's: 0 L1, 1 L2, 2 L3, 3 non-temporal

  // The plan for a call of nr tokens: decode and small batches only. From
  // 8 tokens a weight byte meets enough work that the hardware prefetcher
  // keeps up (dev VM, weights in L2, 8 tokens: 1-4% slower with it).
  static WeightPrefetch for_tokens(int nr) {
    if (nr > 4) return {};
    const PrefetchPlan p = repack_prefetch_plan();
    return {uintptr_t(p.bytes), p.level};
  }

  // Before reading the record of RECORD bytes at rec.
  template <size_t RECORD>
  WEIR_INLINE void before(const uint8_t* rec) const {
    if (ahead == 0) return;
    uintptr_t at = reinterpret_cast<uintptr_t>(rec) + ahead;
    // Opaque to the optimizer: one base register and constant offsets,
    // not a register kept for each line from one record to the next.
    asm("" : "+r"(at));
    constexpr int kLines = int((RECORD + 63) / 64);
#define WEIR_PREFETCH_LINES(HINT) \
  _Pragma("GCC unroll 32") for (int i = 0; i < kLines; ++i) _mm_prefetch(reinterpret_cast<const char*>(at + 64 * i), HINT)
    switch (level) {
      case 0: WEIR_PREFETCH_LINES(_MM_HINT_T0); break;
      case 1: WEIR_PREFETCH_LINES(_MM_HINT_T1); break;
      case 2: WEIR_PREFETCH_LINES(_MM_HINT_T2); break;
      default: WEIR_PREFETCH_LINES(_MM_HINT_NTA); break;
    }
#undef WEIR_PREFETCH_LINES
  }
};

}  // namespace weir::cpu::repack_simd

// Defines the RepackedTileFn NAME: the activations' per-block values made
// once a call (t_act.fill, a thread_local of the kernel's file), then each
// group met by the tokens TOKENS at a time through NAME##_group<TN>(nb,
// group, t_act, first token, y of the group, ldy, prefetch), TN =
// 1..TOKENS. The group calls pf.before<record bytes>(record) a record; the
// first pass over a group prefetches, the later ones (more tokens than
// TOKENS) find the group in cache.
#define WEIR_REPACK_TILE_LOOP(NAME, TARGET, TOKENS, BLOCK)                                                  \
  __attribute__((target(TARGET))) void NAME(int64_t K, const uint8_t* groups, size_t group_bytes, int n_groups, \
                                            const void* a, size_t astride, int nr, float* y, size_t ldy) {  \
    const int64_t nb = K / (BLOCK);                                                                         \
    t_act.fill(a, astride, nr, nb);                                                                         \
    const WeightPrefetch pf = WeightPrefetch::for_tokens(nr);                                               \
    for (int g = 0; g < n_groups; ++g) {                                                                    \
      const uint8_t* gp = groups + size_t(g) * group_bytes;                                                 \
      float* yg = y + size_t(g) * kRepackRows;                                                              \
      for (int j0 = 0; j0 < nr; j0 += (TOKENS)) {                                                           \
        const WeightPrefetch pfj = j0 == 0 ? pf : WeightPrefetch{};                                         \
        switch (std::min((TOKENS), nr - j0)) {                                                              \
          case 1: NAME##_group<1>(nb, gp, t_act, j0, yg, ldy, pfj); break;                                  \
          case 2: NAME##_group<2>(nb, gp, t_act, j0, yg, ldy, pfj); break;                                  \
          case 3: NAME##_group<3>(nb, gp, t_act, j0, yg, ldy, pfj); break;                                  \
          case 4: NAME##_group<4>(nb, gp, t_act, j0, yg, ldy, pfj); break;                                  \
          case 5: NAME##_group<5>(nb, gp, t_act, j0, yg, ldy, pfj); break;                                  \
          case 6: NAME##_group<6>(nb, gp, t_act, j0, yg, ldy, pfj); break;                                  \
          case 7: NAME##_group<7>(nb, gp, t_act, j0, yg, ldy, pfj); break;                                  \
          default: NAME##_group<8>(nb, gp, t_act, j0, yg, ldy, pfj); break;                                 \
        }                                                                                                   \
      }                                                                                                     \
    }                                                                                                       \
  }
