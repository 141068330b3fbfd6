// Run-time choice of the integer dot-product kernels (qdot.h): the CPU's
// SIMD level, capped by WEIR_SIMD, and the per-family kernel tables.
#include <atomic>
#include "backend/cpu/qdot.h"

#include <cstdlib>
#include <cstring>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/qdot_k.h"
#include "backend/cpu/qdot_legacy.h"
#include "backend/cpu/qdot_lookup.h"

namespace weir::cpu {
namespace {

SimdLevel detect_level() {
  __builtin_cpu_init();
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2")))
    return SimdLevel::Reference;
  if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")))
    return SimdLevel::AVX2;
  if (!__builtin_cpu_supports("avx512vnni")) return SimdLevel::AVX512;
  return SimdLevel::AVX512_VNNI;
}

std::atomic<int> g_cap{int(SimdLevel::AVX512_VNNI)};  // set_simd_cap

bool is_legacy(DType w) {
  return w == DType::Q4_0 || w == DType::Q4_1 || w == DType::Q5_0 || w == DType::Q5_1 ||
         w == DType::Q8_0;
}
bool is_lookup(DType w) { return w == DType::IQ4_NL || w == DType::IQ4_XS || w == DType::MXFP4; }
bool is_k(DType w) {
  return w == DType::Q2_K || w == DType::Q3_K || w == DType::Q4_K || w == DType::Q5_K ||
         w == DType::Q6_K;
}

}  // namespace

SimdLevel hardware_simd_level() {
  static const SimdLevel l = detect_level();
  return l;
}

void set_simd_cap(SimdLevel cap) { g_cap.store(int(cap)); }

namespace qk::x86 {
PrefetchPlan g_prefetch;  // qdot_k_x86.h
}
namespace {
bool g_prefetch_set = false;  // set_prefetch was called
}
void set_prefetch(PrefetchPlan p) {
  qk::x86::g_prefetch = p;
  g_prefetch_set = true;
}
PrefetchPlan prefetch_plan() { return qk::x86::g_prefetch; }
PrefetchPlan repack_prefetch_plan() { return g_prefetch_set ? qk::x86::g_prefetch : PrefetchPlan{8192, 1}; }

SimdLevel best_simd_level() {
  const SimdLevel hw = hardware_simd_level(), cap = SimdLevel(g_cap.load(std::memory_order_relaxed));
  return int(cap) < int(hw) ? cap : hw;
}

const char* simd_level_name(SimdLevel l) {
  switch (l) {
    case SimdLevel::Reference: return "reference";
    case SimdLevel::AVX2: return "avx2";
    case SimdLevel::AVX512: return "avx512";
    case SimdLevel::AVX512_VNNI: return "avx512_vnni";
  }
  return "?";
}

QDotKernels qdot_kernels(DType w, SimdLevel level) {
  if (int(level) > int(hardware_simd_level())) level = hardware_simd_level();
  for (int l = int(level); l >= 0; --l) {
    QDotKernels k;
    if (is_legacy(w)) k = qdot_legacy_kernels(w, SimdLevel(l));
    else if (is_k(w)) k = qdot_k_kernels(w, SimdLevel(l));
    else if (is_lookup(w)) k = qdot_lookup_kernels(w, SimdLevel(l));
    else return {};
    if (k) return k;
  }
  return {};
}

size_t act_row_bytes(DType w, int64_t n) { return row_bytes(activation_type(w), n); }

}  // namespace weir::cpu
