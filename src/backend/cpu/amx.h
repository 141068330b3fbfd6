// Whether weir may use AMX (Advanced Matrix Extensions: tile registers and
// the TDPBSSD / TDPBF16PS matrix products) on this CPU, asked once: CPUID
// says the CPU has the tiles (leaf 7: AMX-TILE, AMX-INT8, AMX-BF16), XCR0
// says the operating system saves their state (bits 17 and 18), and Linux,
// which hands the 8 KiB tile data state out per process, grants it
// (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, checked with
// ARCH_GET_XCOMP_PERM), and one tile configured, zeroed and released runs
// without a fault (caught). Anything missing leaves AMX off, saying which.
#pragma once
#include <string>

namespace weir::cpu {

struct AmxSupport {
  bool tile = false, int8 = false, bf16 = false;  // CPUID
  bool os_state = false;                          // XCR0: the OS saves the tiles
  bool permitted = false;                         // Linux granted this process the tile data
  bool runs = false;                              // a tile configured and zeroed without a fault
  std::string why_not;                            // when !usable(): the first thing missing
  bool usable() const { return tile && os_state && permitted && runs; }
  // "int8, bf16" / "none (no AMX-TILE in CPUID)"
  std::string describe() const;
};

// Asked on first call (the permission request included), then kept.
const AmxSupport& amx_support();

// Tries one tile configured, zeroed, stored and released, with SIGILL and
// SIGSEGV caught for the moment: false where that faults (no AMX, or a
// state not granted). amx_support() asks it once, last.
bool amx_tiles_run();

// How many 32-element steps ahead the AMX tile kernel (amx_product.h) asks
// L1 for the tiles it will load (0: none). Process-wide, set once at
// start-up (tools set it from WEIR_AMX_PREFETCH=N to measure other
// distances); default 0: on the H200 host 1, 2 and 4 steps were slower (8B
// Q4_K_M pp512: 288 t/s without, 271-277 with 2, 267-269 with 1 and 4).
void set_amx_prefetch_steps(int steps);
int amx_prefetch_steps();

}  // namespace weir::cpu
