// The AMX product's layouts and plain parts (amx_product.h); the tile
// kernel itself is in amx_tiles.cpp.
#include "backend/cpu/amx_product.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>

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

void amx_build_panel(DType t, const uint8_t* w, size_t wstride, int64_t rows, int64_t k0, int64_t kb,
                     uint16_t* panel) {
  const int64_t slab = std::min(slab_of(t, kb), kb);
  thread_local std::unique_ptr<float[]> buf;
  thread_local int64_t buf_n = 0;
  if (buf_n < kAmxPanelRows * slab) {
    buf.reset(new float[size_t(kAmxPanelRows * slab)]);
    buf_n = kAmxPanelRows * slab;
  }
  alignas(64) uint16_t row[256];
  for (int64_t k = 0; k < kb; k += slab) {
    dequantize_rows(t, w + row_bytes(t, k0 + k), wstride, rows, slab, buf.get(), size_t(slab));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < slab; c += 256) {
        const int64_t n = std::min<int64_t>(256, slab - c);
        to_bf16(buf.get() + r * slab + c, row, n);
        for (int64_t e = 0; e < n; e += kStep)
          std::memcpy(panel + amx_panel_index(r, k + c + e), row + e, kStep * sizeof(uint16_t));
      }
  }
  for (int64_t r = rows; r < kAmxPanelRows; ++r)
    for (int64_t k = 0; k < kb; k += kStep) std::memset(panel + amx_panel_index(r, k), 0, kStep * sizeof(uint16_t));
}

size_t amx_accumulator_floats(int64_t T) {
  return size_t((T + kAmxTokenPad - 1) / kAmxTokenPad) * 4 * 256;
}

void amx_accumulate_reference(const uint16_t* const* panels, int np, int64_t kb, const uint16_t* packed, int64_t steps,
                              int64_t s0, int64_t T, float* const* c, bool zero) {
  for (int p = 0; p < np; ++p)
    for (int64_t t = 0; t < (T + kAmxTokenPad - 1) / kAmxTokenPad * kAmxTokenPad; ++t)
      for (int64_t n = 0; n < kAmxPanelRows; ++n) {
        float* acc = c[p] + (t / 32) * 1024 + ((n / 16) * 2 + (t % 32) / 16) * 256 + (n % 16) * 16 + t % 16;
        if (zero) *acc = 0.0f;
        if (t >= T) continue;  // padding tokens: never read
        for (int64_t s = 0; s < kb / kStep; ++s) {
          const uint16_t* line0 = packed + ((t / 16) * steps + s0 + s) * 512 + (t % 16) * 2;
          const uint16_t* wr = panels[p] + amx_panel_index(n, s * kStep);
          for (int kk = 0; kk < 16; ++kk)
            *acc += bf16_to_f32(wr[2 * kk]) * bf16_to_f32(line0[kk * 32]) +
                    bf16_to_f32(wr[2 * kk + 1]) * bf16_to_f32(line0[kk * 32 + 1]);
        }
      }
}

void amx_store_result(const float* c, int64_t T, int64_t rows, float* y, size_t ldy) {
  for (int64_t t0 = 0; t0 < T; t0 += kAmxTokenPad) {
    const float* blk = c + (t0 / 32) * 1024;
    for (int q = 0; q < 4; ++q) {
      const int64_t nb = 16 * (q / 2), tb = t0 + 16 * (q % 2);
      const int64_t nn = std::min<int64_t>(16, rows - nb), tt = std::min<int64_t>(16, T - tb);
      for (int64_t j = 0; j < tt; ++j)
        for (int64_t n = 0; n < nn; ++n) y[size_t(tb + j) * ldy + size_t(nb + n)] = blk[q * 256 + n * 16 + j];
    }
  }
}

void amx_product_rows(DType t, const uint8_t* w, size_t wstride, int64_t N, int64_t K, const uint16_t* packed,
                      int64_t T, float* y, size_t ldy, int64_t n0, int64_t n1, bool tiles, int64_t k_block) {
  if (n0 % kAmxPanelRows != 0) throw Error("amx product: rows must start at a multiple of 32");
  constexpr int kGroup = 4;  // panels a group: 128 rows
  // The K block: whole slabs of the type, at most k_block.
  const int64_t slab = slab_of(t, K);
  const int64_t kb_max = std::max(slab, std::min(K, k_block) / slab * slab);
  struct Buffers {
    std::unique_ptr<uint16_t, void (*)(void*)> panels{nullptr, std::free};
    std::unique_ptr<float, void (*)(void*)> acc{nullptr, std::free};
    size_t panel_elems = 0, acc_floats = 0;
  };
  thread_local Buffers b;
  const size_t pe = size_t(kAmxPanelRows * kb_max), af = amx_accumulator_floats(T);
  auto grow = [](auto& ptr, size_t& have, size_t want, size_t elem) {
    if (have >= want) return;
    void* m = nullptr;
    if (posix_memalign(&m, 64, want * elem) != 0) throw Error("amx product: cannot allocate its buffers");
    ptr.reset(static_cast<typename std::remove_reference_t<decltype(ptr)>::element_type*>(m));
    have = want;
  };
  grow(b.panels, b.panel_elems, pe * kGroup, sizeof(uint16_t));
  grow(b.acc, b.acc_floats, af * kGroup, sizeof(float));
  uint16_t* panels[kGroup];
  float* acc[kGroup];
  for (int p = 0; p < kGroup; ++p) {
    panels[p] = b.panels.get() + size_t(p) * pe;
    acc[p] = b.acc.get() + size_t(p) * af;
  }
  const int64_t end = std::min(n1, N);
  for (int64_t g0 = n0; g0 < end; g0 += kGroup * kAmxPanelRows) {
    const int np = int(std::min<int64_t>(kGroup, (end - g0 + kAmxPanelRows - 1) / kAmxPanelRows));
    for (int64_t k0 = 0; k0 < K; k0 += kb_max) {
      const int64_t kb = std::min(kb_max, K - k0);
      for (int p = 0; p < np; ++p) {
        const int64_t r0 = g0 + p * kAmxPanelRows;
        amx_build_panel(t, w + size_t(r0) * wstride, wstride, std::min(kAmxPanelRows, end - r0), k0, kb,
                        panels[p]);
      }
      (tiles ? amx_accumulate : amx_accumulate_reference)(panels, np, kb, packed, K / kStep, k0 / kStep, T, acc,
                                                          k0 == 0);
    }
    for (int p = 0; p < np; ++p) {
      const int64_t r0 = g0 + p * kAmxPanelRows;
      amx_store_result(acc[p], T, std::min(kAmxPanelRows, end - r0), y + r0, ldy);
    }
  }
}

}  // namespace weir::cpu
