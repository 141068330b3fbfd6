// SIMD helpers shared by the CPU kernels (ops_*.cpp only; not an interface).
//
// How kernels get vector code without -march flags or #ifdef blocks: a hot
// function is written once as an always-inline template over a GCC vector
// type (v16sf, v8sf, v4sf), and instantiated inside three small wrappers
// compiled for different targets (WEIR_TARGET_AVX512, WEIR_TARGET_AVX2, none).
// active_isa() picks one at run time from the CPU's features. Inlining a
// default-target body into a target("avx512f") wrapper is allowed by GCC and
// compiles the body for AVX-512.
#pragma once
#include <atomic>
#include <cstdint>
#include <cstring>

// Vector arguments of inline helpers compiled for the default target would
// change the ABI if they were ever real calls; they never are (always_inline).
#pragma GCC diagnostic ignored "-Wpsabi"
// GCC 12's AVX-512 headers start some intrinsics from an uninitialized
// vector on purpose (_mm512_undefined_*); -Wmaybe-uninitialized flags them.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#define WEIR_INLINE inline __attribute__((always_inline))
#define WEIR_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,f16c,bmi,bmi2")))
#define WEIR_TARGET_AVX2 __attribute__((target("avx2,fma,f16c,bmi,bmi2")))

namespace weir::cpu::simd {

enum class Isa : int { Generic = 0, Avx2 = 1, Avx512 = 2 };

inline const char* isa_name(Isa i) {
  switch (i) {
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2";
    case Isa::Generic: break;
  }
  return "generic";
}

// The best kernel family this CPU runs.
inline Isa detect_isa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2"))
    return Isa::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("bmi2"))
    return Isa::Avx2;
  return Isa::Generic;
}

inline std::atomic<int>& isa_slot() {
  static std::atomic<int> slot{int(detect_isa())};
  return slot;
}
inline Isa active_isa() { return Isa(isa_slot().load(std::memory_order_relaxed)); }
// For tests: run the kernels of a lower family (never above what the CPU has).
// Returns the family actually set.
inline Isa set_active_isa(Isa want) {
  const Isa best = detect_isa();
  const Isa got = int(want) > int(best) ? best : want;
  isa_slot().store(int(got), std::memory_order_relaxed);
  return got;
}

// Defines `static void name params` that calls the always-inline template
// name_impl<V> args compiled for the active family, with V the widest vector
// type of that family (v16sf, v8sf or v4sf).
#define WEIR_DISPATCH(name, params, args)                                 \
  WEIR_TARGET_AVX512 static void name##_avx512 params { name##_impl<::weir::cpu::simd::v16sf> args; } \
  WEIR_TARGET_AVX2 static void name##_avx2 params { name##_impl<::weir::cpu::simd::v8sf> args; }     \
  static void name##_generic params { name##_impl<::weir::cpu::simd::v4sf> args; }                   \
  static void name params {                                                \
    switch (::weir::cpu::simd::active_isa()) {                             \
      case ::weir::cpu::simd::Isa::Avx512: return name##_avx512 args;      \
      case ::weir::cpu::simd::Isa::Avx2: return name##_avx2 args;          \
      default: return name##_generic args;                                 \
    }                                                                      \
  }

typedef float v16sf __attribute__((vector_size(64)));
typedef float v8sf __attribute__((vector_size(32)));
typedef float v4sf __attribute__((vector_size(16)));

typedef int32_t v16si __attribute__((vector_size(64)));
typedef int32_t v8si __attribute__((vector_size(32)));
typedef int32_t v4si __attribute__((vector_size(16)));
typedef double v16df __attribute__((vector_size(128)));
typedef double v8df __attribute__((vector_size(64)));
typedef double v4df __attribute__((vector_size(32)));

template <class V>
inline constexpr int kLanes = int(sizeof(V) / sizeof(float));

// The int32 and double vectors with as many lanes as float vector V.
template <class V>
struct VecOf;
template <>
struct VecOf<v16sf> {
  using i32 = v16si;
  using f64 = v16df;
};
template <>
struct VecOf<v8sf> {
  using i32 = v8si;
  using f64 = v8df;
};
template <>
struct VecOf<v4sf> {
  using i32 = v4si;
  using f64 = v4df;
};

template <class V>
WEIR_INLINE V loadu(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}
template <class V>
WEIR_INLINE void storeu(float* p, const V& v) {
  std::memcpy(p, &v, sizeof(V));
}
// All lanes x. Written x - 0 because GCC folds that to a broadcast (x - 0 is
// x for every x), while 0 + x is not x for x = -0 and costs an add, and a
// brace list of 16 x makes GCC 12 emit masked inserts.
template <class V>
WEIR_INLINE V splat(float x) {
  return x - V{};
}

// Horizontal sums. Halving trees, so AVX-512 and AVX2 code stays in registers.
WEIR_INLINE float hsum(v4sf v) {
  const v4sf a = v + __builtin_shufflevector(v, v, 2, 3, 0, 1);
  return a[0] + a[1];
}
WEIR_INLINE float hsum(const v8sf& v) {
  return hsum(__builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7));
}
WEIR_INLINE float hsum(const v16sf& v) {
  return hsum(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
              __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15));
}

// Four horizontal sums at once: returns {hsum(a), hsum(b), hsum(c), hsum(d)}.
WEIR_INLINE v4sf hsum4(v4sf a, v4sf b, v4sf c, v4sf d) {
  // [a0+a2, b0+b2, a1+a3, b1+b3] style transposition.
  const v4sf ab = __builtin_shufflevector(a, b, 0, 4, 1, 5) + __builtin_shufflevector(a, b, 2, 6, 3, 7);
  const v4sf cd = __builtin_shufflevector(c, d, 0, 4, 1, 5) + __builtin_shufflevector(c, d, 2, 6, 3, 7);
  // ab = [a02, b02, a13, b13]; cd likewise.
  return __builtin_shufflevector(ab, cd, 0, 1, 4, 5) + __builtin_shufflevector(ab, cd, 2, 3, 6, 7);
}
WEIR_INLINE v4sf hsum4(const v8sf& a, const v8sf& b, const v8sf& c, const v8sf& d) {
  auto h = [](const v8sf& v) {
    return __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
  };
  return hsum4(h(a), h(b), h(c), h(d));
}
WEIR_INLINE v4sf hsum4(const v16sf& a, const v16sf& b, const v16sf& c, const v16sf& d) {
  auto h = [](const v16sf& v) {
    return __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
           __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  };
  auto h8 = [](const v8sf& v) {
    return __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
  };
  return hsum4(h8(h(a)), h8(h(b)), h8(h(c)), h8(h(d)));
}

// IEEE half -> float, exact (same values as core/half.h fp16_to_f32 for all
// finite inputs and infinities), branch-free so loops over it vectorize.
WEIR_INLINE float fp16_to_f32_fast(uint16_t h) {
  auto as_f = [](uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; };
  auto as_u = [](float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; };
  const uint32_t w = uint32_t(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  // Normal numbers: move the exponent and mantissa into place and rebias by
  // a multiplication (exact).
  const float normalized = as_f((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  // Subnormals: build 0.5 + m * 2^-24 and subtract 0.5 (exact).
  const float denormalized = as_f((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t r = sign | (two_w < (1u << 27) ? as_u(denormalized) : as_u(normalized));
  return as_f(r);
}

// expf for a vector: e^x = 2^n * e^r, n = round(x / ln 2), r = x - n ln 2
// (two-part ln 2), e^r by its degree-7 Taylor polynomial (|r| <= ln2/2,
// truncation error < 4e-9 relative): within 0.9 ulp of the exact value on
// [-87, 0] (checked against double exp; ggml's own AVX-512/AVX2 softmax uses
// an approximation of similar accuracy). Inputs
// below -87.3 give ~1e-38 instead of a subnormal or zero, which is all a
// softmax of s - max (<= 0) needs; 0 gives exactly 1.
template <class V>
WEIR_INLINE V vexp(const V& xin) {
  using VI = typename VecOf<V>::i32;
  const V lo = splat<V>(-87.3f);
  const V x = xin < lo ? lo : xin;
  const V shifter = splat<V>(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const V t = x * 1.44269504088896341f + shifter;
  const V n = t - shifter;
  V r = x - n * 0.693145751953125f;   // ln 2, high part (exact product)
  r = r - n * 1.428606765330187e-06f;  // ln 2, low part
  V p = splat<V>(1.0f / 5040);
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  VI ti;
  std::memcpy(&ti, &t, sizeof(t));
  const VI e = (ti - 0x4B400000) << 23;  // n in the exponent field
  VI pi;
  std::memcpy(&pi, &p, sizeof(p));
  pi += e;
  std::memcpy(&p, &pi, sizeof(p));
  return p;
}

// y[c][r] = dot(w row r, x row c), r < MR, c < NR; w rows ldw floats apart,
// x rows anywhere. Each dot is summed lane-wise over k (one vector
// accumulator, fused multiply-adds), then reduced with hsum/hsum4 (the same
// tree for every r and c), then the k % lanes tail is added.
template <class V, int MR, int NR>
WEIR_INLINE void dot_tile(const float* __restrict w, size_t ldw, const float* const* xr, int64_t K,
                          float* const* yr) {
  constexpr int L = kLanes<V>;
  V acc[MR][NR];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
    for (int c = 0; c < NR; ++c) acc[r][c] = V{};
  int64_t k = 0;
  for (; k + L <= K; k += L) {
    V xv[NR];
#pragma GCC unroll 16
    for (int c = 0; c < NR; ++c) xv[c] = loadu<V>(xr[c] + k);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const V wv = loadu<V>(w + r * ldw + k);
#pragma GCC unroll 16
      for (int c = 0; c < NR; ++c) acc[r][c] += wv * xv[c];
    }
  }
  float tail[MR][NR] = {};
  for (; k < K; ++k)
    for (int r = 0; r < MR; ++r)
      for (int c = 0; c < NR; ++c) tail[r][c] += w[r * ldw + k] * xr[c][k];
#pragma GCC unroll 16
  for (int c = 0; c < NR; ++c) {
    if constexpr (MR % 4 == 0) {
#pragma GCC unroll 4
      for (int r = 0; r < MR; r += 4) {
        v4sf s = hsum4(acc[r][c], acc[r + 1][c], acc[r + 2][c], acc[r + 3][c]);
        s += v4sf{tail[r][c], tail[r + 1][c], tail[r + 2][c], tail[r + 3][c]};
        std::memcpy(yr[c] + r, &s, sizeof(s));
      }
    } else {
      for (int r = 0; r < MR; ++r) yr[c][r] = hsum(acc[r][c]) + tail[r][c];
    }
  }
}

}  // namespace weir::cpu::simd
