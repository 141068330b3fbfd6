// What the CPU backend's matrix products run on this host, in one line for
// `weir --version` and `weir bench`: the SIMD level of its kernels, the
// weight types it repacks (repack.h) and whether AMX is there to use.
#pragma once
#include <string>

namespace weir::cpu {

// "AVX512_VNNI kernels; weights repacked: q4_0, q4_K; AMX: none (no AMX-TILE
// in CPUID)". repack: CpuOptions::repack.
std::string describe_cpu_kernels(bool repack);

}  // namespace weir::cpu
