// The q4_0x8 layout (repack.h): repacking, the reference product and the
// choice of kernel; the SIMD kernels are in repack_q4_0_simd.cpp.
#include <cmath>
#include <cstring>

#include "backend/cpu/repack.h"
#include "core/error.h"
#include "core/half.h"
#include "core/quant/block_formats.h"

namespace weir::cpu {

namespace repack_simd {
void q4_0x8_tile_avx2(int64_t K, const uint8_t* groups, size_t group_bytes, int n_groups, const void* a, size_t astride,
                      int nr, float* y, size_t ldy);
void q4_0x8_tile_avx512_vnni(int64_t K, const uint8_t* groups, size_t group_bytes, int n_groups, const void* a,
                             size_t astride, int nr, float* y, size_t ldy);
}  // namespace repack_simd

namespace {

using quant::BlockQ4_0;
using quant::BlockQ8_0;
using quant::kQK;

constexpr size_t kRecordBytes = 16 + 128;  // 8 scales, 4 chunks of 32 nibble bytes

void reference_q4_0x8(int64_t K, const uint8_t* groups, size_t group_bytes, int n_groups, const void* a,
                      size_t astride, int nr, float* y, size_t ldy) {
  const int64_t nb = K / kQK;
  for (int g = 0; g < n_groups; ++g)
    for (int r = 0; r < kRepackRows; ++r)
      for (int j = 0; j < nr; ++j) {
        const auto* ab = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(a) + size_t(j) * astride);
        float acc = 0.0f;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* rec = groups + size_t(g) * group_bytes + size_t(b) * kRecordBytes;
          uint16_t dh;
          std::memcpy(&dh, rec + 2 * r, 2);
          int32_t isum = 0;
          for (int i = 0; i < kQK; ++i) isum -= 8 * ab[b].qs[i];
          for (int c = 0; c < 4; ++c)
            for (int k = 0; k < 4; ++k) {
              const uint8_t q = rec[16 + 32 * c + 4 * r + k];
              isum += int32_t(q & 15) * ab[b].qs[4 * c + k] + int32_t(q >> 4) * ab[b].qs[16 + 4 * c + k];
            }
          const float s = fp16_to_f32(dh) * fp16_to_f32(ab[b].d);
          acc = std::fma(float(isum), s, acc);
        }
        y[size_t(j) * ldy + size_t(g) * kRepackRows + size_t(r)] = acc;
      }
}

}  // namespace

bool can_repack(DType t, int64_t K) { return t == DType::Q4_0 && K > 0 && K % kQK == 0; }

size_t repacked_group_bytes(DType t, int64_t K) {
  if (!can_repack(t, K)) throw Error(std::string("repack: no layout for ") + dtype_name(t) + " rows of " + std::to_string(K));
  return size_t(K / kQK) * kRecordBytes;
}

void repack_groups(DType t, const uint8_t* w, size_t wstride, int64_t K, int64_t N, int64_t g0, int64_t g1,
                   uint8_t* out) {
  const size_t gb = repacked_group_bytes(t, K);
  const int64_t nb = K / kQK;
  for (int64_t g = g0; g < g1; ++g) {
    uint8_t* dst = out + size_t(g - g0) * gb;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* rec = dst + size_t(b) * kRecordBytes;
      for (int r = 0; r < kRepackRows; ++r) {
        if (g * kRepackRows + r >= N) {  // padding: scale 0, nibbles 0
          std::memset(rec + 2 * r, 0, 2);
          for (int c = 0; c < 4; ++c) std::memset(rec + 16 + 32 * c + 4 * r, 0, 4);
          continue;
        }
        const auto* blk = reinterpret_cast<const BlockQ4_0*>(w + size_t(g * kRepackRows + r) * wstride) + b;
        std::memcpy(rec + 2 * r, &blk->d, 2);
        for (int c = 0; c < 4; ++c) std::memcpy(rec + 16 + 32 * c + 4 * r, blk->qs + 4 * c, 4);
      }
    }
  }
}

void repacked_tile_reference(DType t, int64_t K, const uint8_t* groups, size_t group_bytes, int n_groups,
                             const void* a, size_t astride, int nr, float* y, size_t ldy) {
  if (!can_repack(t, K)) throw Error(std::string("repack: no layout for ") + dtype_name(t));
  reference_q4_0x8(K, groups, group_bytes, n_groups, a, astride, nr, y, ldy);
}

RepackedTileFn repacked_tile(DType t, SimdLevel level) {
  if (t != DType::Q4_0) return nullptr;
  if (int(level) > int(hardware_simd_level())) level = hardware_simd_level();
  if (level == SimdLevel::AVX512_VNNI) return repack_simd::q4_0x8_tile_avx512_vnni;
  if (level == SimdLevel::AVX2 || level == SimdLevel::AVX512) return repack_simd::q4_0x8_tile_avx2;
  return [](int64_t K, const uint8_t* groups, size_t group_bytes, int n_groups, const void* a, size_t astride, int nr,
            float* y, size_t ldy) { reference_q4_0x8(K, groups, group_bytes, n_groups, a, astride, nr, y, ldy); };
}

}  // namespace weir::cpu
