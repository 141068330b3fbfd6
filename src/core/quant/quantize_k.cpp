// K-quant quantizers: choose scales and quants with k_fit.cpp, then pack
// them in the layouts block_formats.h describes (the inverse of
// dequantize_k.cpp's unpacking).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "core/quant/block_formats.h"
#include "core/quant/k_fit.h"
#include "core/quant/quantize_blocks.h"

namespace weir::quant {
namespace {

template <typename Block>
void store_block(void* dst, int64_t b, const Block& blk) {
  std::memcpy(static_cast<uint8_t*>(dst) + b * int64_t(sizeof(Block)), &blk, sizeof(Block));
}

// Inverse of unpack_scale_min_k4: 8 six-bit scales and mins in 12 bytes.
void pack_scale_min_k4(const uint8_t sc[8], const uint8_t mn[8], uint8_t out[kKScaleSize]) {
  for (int j = 0; j < 4; ++j) {
    out[j] = uint8_t((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = uint8_t((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    out[j + 8] = uint8_t((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
}

// Low two bits of element i = 128*h + 32*s + l go to qs[32*h + l], bits 2s.
void pack_2bit(const uint8_t q[kQK_K], uint8_t qs[kQK_K / 4]) {
  std::memset(qs, 0, kQK_K / 4);
  for (int i = 0; i < kQK_K; ++i) qs[32 * (i / 128) + i % 32] |= uint8_t((q[i] & 3) << (2 * ((i / 32) % 4)));
}

// Element i = 64*c + 32*k + l goes to qs[32*c + l], nibble k.
void pack_4bit_k(const uint8_t q[kQK_K], uint8_t qs[kQK_K / 2]) {
  std::memset(qs, 0, kQK_K / 2);
  for (int i = 0; i < kQK_K; ++i) qs[32 * (i / 64) + i % 32] |= uint8_t((q[i] & 15) << (4 * ((i / 32) % 2)));
}

const AffineShape kQ2Shape{16, 16, 3, 15};
const AffineShape kQ4Shape{8, 32, 15, 63};
const AffineShape kQ5Shape{8, 32, 31, 63};
const SymmetricShape kQ3Shape{16, 16, -4, 3, 31};
const SymmetricShape kQ6Shape{16, 16, -32, 31, 127};

}  // namespace

void quantize_q2_K(const float* x, void* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    AffineBlock f;
    fit_affine_superblock(x, kQ2Shape, &f);
    BlockQ2_K blk;
    for (int j = 0; j < 16; ++j) blk.scales[j] = uint8_t(f.sc[j] | (f.mn[j] << 4));
    pack_2bit(f.L, blk.qs);
    blk.d = f.d;
    blk.dmin = f.dmin;
    store_block(dst, b, blk);
  }
}

void quantize_q4_K(const float* x, void* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    AffineBlock f;
    fit_affine_superblock(x, kQ4Shape, &f);
    BlockQ4_K blk;
    blk.d = f.d;
    blk.dmin = f.dmin;
    pack_scale_min_k4(f.sc, f.mn, blk.scales);
    pack_4bit_k(f.L, blk.qs);
    store_block(dst, b, blk);
  }
}

void quantize_q5_K(const float* x, void* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    AffineBlock f;
    fit_affine_superblock(x, kQ5Shape, &f);
    BlockQ5_K blk;
    blk.d = f.d;
    blk.dmin = f.dmin;
    pack_scale_min_k4(f.sc, f.mn, blk.scales);
    pack_4bit_k(f.L, blk.qs);
    std::memset(blk.qh, 0, sizeof blk.qh);  // bit 4 of element i: qh[i % 32], bit i / 32
    for (int i = 0; i < kQK_K; ++i) blk.qh[i % 32] |= uint8_t((f.L[i] >> 4) << (i / 32));
    store_block(dst, b, blk);
  }
}

void quantize_q3_K(const float* x, void* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    SymmetricBlock f;
    fit_symmetric_superblock(x, kQ3Shape, &f);
    BlockQ3_K blk;
    uint8_t q[kQK_K];  // stored quant q + 4 in [0, 7]: low 2 bits + high bit
    for (int i = 0; i < kQK_K; ++i) q[i] = uint8_t(f.L[i] + 4);
    pack_2bit(q, blk.qs);
    std::memset(blk.hmask, 0, sizeof blk.hmask);
    for (int i = 0; i < kQK_K; ++i) blk.hmask[i % 32] |= uint8_t((q[i] >> 2) << (i / 32));
    std::memset(blk.scales, 0, sizeof blk.scales);
    for (int j = 0; j < 16; ++j) {  // 6-bit sc + 32, split as unpack_scales_q3_K reads it
      const int v = f.sc[j] + 32;
      blk.scales[j % 8] |= uint8_t((v & 15) << (4 * (j / 8)));
      blk.scales[8 + j % 4] |= uint8_t((v >> 4) << (2 * (j / 4)));
    }
    blk.d = f.d;
    store_block(dst, b, blk);
  }
}

void quantize_q6_K(const float* x, void* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    SymmetricBlock f;
    fit_symmetric_superblock(x, kQ6Shape, &f);
    BlockQ6_K blk;
    std::memset(blk.ql, 0, sizeof blk.ql);
    std::memset(blk.qh, 0, sizeof blk.qh);
    for (int i = 0; i < kQK_K; ++i) {  // stored quant q + 32 in [0, 63]
      const int q = f.L[i] + 32, h = i / 128, s = (i / 32) % 4, l = i % 32;
      blk.ql[64 * h + 32 * (s & 1) + l] |= uint8_t((q & 15) << (4 * (s >> 1)));
      blk.qh[32 * h + l] |= uint8_t((q >> 4) << (2 * s));
    }
    for (int j = 0; j < 16; ++j) blk.scales[j] = f.sc[j];
    blk.d = f.d;
    store_block(dst, b, blk);
  }
}

// q8_K has a float32 scale: the largest magnitude maps to -128 (its sign
// chosen so), everything else rounds to nearest within [-128, 127].
void quantize_q8_K(const float* x, void* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < kQK_K; ++i)
      if (std::fabs(x[i]) > amax) { amax = std::fabs(x[i]); max = x[i]; }
    BlockQ8_K blk;
    const float iscale = amax > 0.0f ? -128.0f / max : 0.0f;
    blk.d = amax > 0.0f ? 1.0f / iscale : 0.0f;
    for (int i = 0; i < kQK_K; ++i) {
      const float v = std::nearbyint(x[i] * iscale);
      blk.qs[i] = v == v ? int8_t(std::clamp(v, -128.0f, 127.0f)) : int8_t(0);
    }
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += blk.qs[16 * g + i];
      blk.bsums[g] = int16_t(sum);
    }
    store_block(dst, b, blk);
  }
}

}  // namespace weir::quant
