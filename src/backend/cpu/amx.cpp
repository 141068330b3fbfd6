#include "backend/cpu/amx.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <csetjmp>
#include <csignal>
#include <cstdint>

#include "backend/cpu/ops_simd.h"  // <immintrin.h> with GCC's warnings tamed

namespace weir::cpu {

namespace {

// Linux's arch_prctl codes for the dynamically enabled XSAVE features
// (arch/x86/include/uapi/asm/prctl.h) and the tile data's feature number.
constexpr int kArchGetXcompPerm = 0x1022;
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtileCfg = 17;
constexpr int kXfeatureXtileData = 18;

uint64_t read_xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

sigjmp_buf g_fault_jump;
void on_fault(int) { siglongjmp(g_fault_jump, 1); }

// One tile configured, zeroed, stored and released.
__attribute__((target("amx-tile"))) void touch_tiles() {
  alignas(64) uint8_t cfg[64] = {};
  cfg[0] = 1;   // palette 1
  cfg[16] = 64; // tile 0: 64 bytes a row (colsb[0], little-endian uint16)
  cfg[48] = 1;  // tile 0: one row
  _tile_loadconfig(cfg);
  _tile_zero(0);
  alignas(64) uint8_t out[64];
  _tile_stored(0, out, 64);
  _tile_release();
}

// Whether the tile instructions run here: a fault (SIGILL where a hypervisor
// hides them despite CPUID, SIGSEGV on a refused state) is caught once, at
// the first question, and AMX stays off.
}  // namespace

bool amx_tiles_run() {
  struct sigaction sa = {}, old_ill = {}, old_segv = {};
  sa.sa_handler = on_fault;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGILL, &sa, &old_ill);
  sigaction(SIGSEGV, &sa, &old_segv);
  bool ok = false;
  if (sigsetjmp(g_fault_jump, 1) == 0) {
    touch_tiles();
    ok = true;
  }
  sigaction(SIGILL, &old_ill, nullptr);
  sigaction(SIGSEGV, &old_segv, nullptr);
  return ok;
}

namespace {

AmxSupport probe() {
  AmxSupport a;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    a.why_not = "no CPUID leaf 7";
    return a;
  }
  a.bf16 = edx & (1u << 22);
  a.tile = edx & (1u << 24);
  a.int8 = edx & (1u << 25);
  if (!a.tile) {
    a.why_not = "no AMX-TILE in CPUID";
    return a;
  }
  unsigned e1 = 0, b1 = 0, c1 = 0, d1 = 0;
  const bool osxsave = __get_cpuid(1, &e1, &b1, &c1, &d1) && (c1 & (1u << 27));
  const uint64_t tiles = (uint64_t(1) << kXfeatureXtileCfg) | (uint64_t(1) << kXfeatureXtileData);
  a.os_state = osxsave && (read_xcr0() & tiles) == tiles;
  if (!a.os_state) {
    a.why_not = "the operating system does not enable the tile state (XCR0)";
    return a;
  }
  // The request is idempotent; the answer is read back rather than trusted.
  syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData);
  unsigned long perm = 0;
  a.permitted = syscall(SYS_arch_prctl, kArchGetXcompPerm, &perm) == 0 && (perm & (1ul << kXfeatureXtileData));
  if (!a.permitted) {
    a.why_not = "Linux did not grant the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM)";
    return a;
  }
  a.runs = amx_tiles_run();
  if (!a.runs) a.why_not = "the tile instructions fault here";
  return a;
}

}  // namespace

std::string AmxSupport::describe() const {
  if (!usable()) return "none (" + why_not + ")";
  std::string s;
  if (int8) s += "int8";
  if (bf16) s += std::string(s.empty() ? "" : ", ") + "bf16";
  return s.empty() ? "tiles only" : s;
}

const AmxSupport& amx_support() {
  static const AmxSupport a = probe();
  return a;
}

}  // namespace weir::cpu
