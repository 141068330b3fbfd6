// The AMX product's layouts and plain parts (amx_product.h); the tile
// kernel itself is in amx_tiles.cpp.
#include "backend/cpu/amx_product.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "backend/cpu/ops_dequant.h"
#include "backend/cpu/ops_simd.h"  // <immintrin.h> with GCC's warnings tamed
#include "core/error.h"
#include "core/half.h"

namespace weir::cpu {

namespace {

constexpr int64_t kStep = 32;  // elements of K a tile product takes

bool has_avx512_bf16() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
  return has;
}

// n floats (a multiple of 32) to bf16, round to nearest even.
__attribute__((target("avx512f,avx512bf16"))) void to_bf16_avx512(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; i += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(out + i, reinterpret_cast<const __m512i&>(v));
  }
}

void to_bf16(const float* x, uint16_t* out, int64_t n) {
  if (has_avx512_bf16() && n % 32 == 0) return to_bf16_avx512(x, out, n);
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(x[i]);
}

// Elements of K dequantized at once when building a panel: whole blocks.
int64_t slab_of(DType t, int64_t K) {
  const int64_t b = traits(t).block_size;
  const int64_t s = std::max<int64_t>(b, 256);
  return K % s == 0 ? s : b;
}

}  // namespace

bool amx_product_fits(DType t, int64_t K) {
  if (K <= 0 || K % kStep != 0 || !traits(t).dequantizable) return false;
  return K % traits(t).block_size == 0;
}

size_t amx_packed_bytes(int64_t T, int64_t K) {
  const int64_t tp = (T + kAmxTokenPad - 1) / kAmxTokenPad * kAmxTokenPad;
  return size_t(tp) * size_t(K) * sizeof(uint16_t);
}

void amx_pack_token(const float* x, int64_t K, int64_t t, uint16_t* base) {
  // One token is one dword column of each step's 16 lines.
  uint32_t* tile = reinterpret_cast<uint32_t*>(base) + (t / 16) * (K / kStep) * 256 + (t % 16);
  alignas(64) uint16_t b[kStep];
  for (int64_t s = 0; s < K / kStep; ++s) {
    to_bf16(x + s * kStep, b, kStep);
    uint32_t* line = tile + s * 256;
    for (int kk = 0; kk < 16; ++kk) std::memcpy(line + kk * 16, b + 2 * kk, 4);
  }
}

void amx_build_panel(DType t, const uint8_t* w, size_t wstride, int64_t rows, int64_t K, uint16_t* panel) {
  const int64_t slab = slab_of(t, K);
  thread_local std::unique_ptr<float[]> buf;
  thread_local int64_t buf_n = 0;
  if (buf_n < kAmxPanelRows * slab) {
    buf.reset(new float[size_t(kAmxPanelRows * slab)]);
    buf_n = kAmxPanelRows * slab;
  }
  for (int64_t k0 = 0; k0 < K; k0 += slab) {
    dequantize_rows(t, w + row_bytes(t, k0), wstride, rows, slab, buf.get(), size_t(slab));
    for (int64_t r = 0; r < rows; ++r) to_bf16(buf.get() + r * slab, panel + r * K + k0, slab);
  }
  if (rows < kAmxPanelRows) std::memset(panel + rows * K, 0, size_t((kAmxPanelRows - rows) * K) * sizeof(uint16_t));
}

void amx_panel_product_reference(const uint16_t* panel, int64_t K, const uint16_t* packed, int64_t T, int64_t rows,
                                 float* y, size_t ldy) {
  const int64_t steps = K / kStep;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < rows; ++n) {
      float acc = 0.0f;
      for (int64_t s = 0; s < steps; ++s) {
        const uint16_t* line0 = packed + ((t / 16) * steps + s) * 512 + (t % 16) * 2;
        for (int kk = 0; kk < 16; ++kk) {
          const float w0 = bf16_to_f32(panel[n * K + s * kStep + 2 * kk]);
          const float w1 = bf16_to_f32(panel[n * K + s * kStep + 2 * kk + 1]);
          const float a0 = bf16_to_f32(line0[kk * 32]), a1 = bf16_to_f32(line0[kk * 32 + 1]);
          acc += w0 * a0 + w1 * a1;
        }
      }
      y[size_t(t) * ldy + size_t(n)] = acc;
    }
}

void amx_product_rows(DType t, const uint8_t* w, size_t wstride, int64_t N, int64_t K, const uint16_t* packed,
                      int64_t T, float* y, size_t ldy, int64_t n0, int64_t n1) {
  if (n0 % kAmxPanelRows != 0) throw Error("amx product: rows must start at a multiple of 32");
  thread_local std::unique_ptr<uint16_t, void (*)(void*)> panel{nullptr, std::free};
  thread_local int64_t panel_k = 0;
  if (panel_k < K) {
    void* p = nullptr;
    if (posix_memalign(&p, 64, size_t(kAmxPanelRows * K) * sizeof(uint16_t)) != 0)
      throw Error("amx product: cannot allocate a panel");
    panel.reset(static_cast<uint16_t*>(p));
    panel_k = K;
  }
  for (int64_t r0 = n0; r0 < std::min(n1, N); r0 += kAmxPanelRows) {
    const int64_t rows = std::min({kAmxPanelRows, N - r0, n1 - r0});
    amx_build_panel(t, w + size_t(r0) * wstride, wstride, rows, K, panel.get());
    amx_panel_product(panel.get(), K, packed, T, rows, y + r0, ldy);
  }
}

}  // namespace weir::cpu
