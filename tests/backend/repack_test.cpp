// The CPU backend's repacked weight layouts (backend/cpu/repack.h), for
// every type that has one: every kernel equals the plain reference bit for
// bit on random rows (odd sizes, every token count of a tile, several
// groups, rows apart by a stride, a token with an outlier) and on the
// quants' extreme values (no int16 saturation, no int32 overflow), the
// reference equals a float64 product of the same quantized values to float
// rounding, the file-layout kernels (qdot.h) agree with it to float
// rounding (their float order differs), and a last group cut by N gives 0
// for its padding rows without reading past row N.
#include "backend/cpu/repack.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/qdot.h"
#include "core/dtype.h"
#include "core/quant/block_formats.h"
#include "core/quant/random_blocks.h"

namespace weir::cpu {
namespace {

const DType kTypes[] = {DType::Q4_0, DType::Q5_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_0};

// K in blocks of the type, groups of 8 rows, tokens.
struct Case {
  int64_t blocks;
  int groups, nr;
};
const Case kCases[] = {{1, 1, 1}, {2, 2, 3}, {3, 1, 8}, {129, 3, 5}, {32, 5, 7}, {64, 2, 2}, {5, 4, 4}, {7, 2, 6}};

int64_t block_of(DType t) { return traits(t).block_size; }

// Sets every quant (and sub-block scale) of the n-element rows of type t to
// the largest magnitude the format holds, signs mixed: what stresses int16
// products and int32 sums most.
void saturate_row(DType t, uint8_t* row, int64_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> bit(0, 1);
  for (int64_t b = 0; b < n / block_of(t); ++b) {
    if (t == DType::Q4_0) {
      auto* blk = reinterpret_cast<quant::BlockQ4_0*>(row) + b;
      for (uint8_t& q : blk->qs) q = bit(rng) ? 0xFF : 0x00;  // q - 8 = 7 or -8
    } else if (t == DType::Q5_0) {
      auto* blk = reinterpret_cast<quant::BlockQ5_0*>(row) + b;
      for (uint8_t& q : blk->qs) q = bit(rng) ? 0xFF : 0x00;
      for (uint8_t& q : blk->qh) q = bit(rng) ? 0xFF : 0x00;  // q - 16 = 15 or -16
    } else if (t == DType::Q8_0) {
      auto* blk = reinterpret_cast<quant::BlockQ8_0*>(row) + b;
      for (int8_t& q : blk->qs) q = bit(rng) ? 127 : -128;
    } else if (t == DType::Q4_K) {
      auto* blk = reinterpret_cast<quant::BlockQ4_K*>(row) + b;
      std::memset(blk->scales, 0xFF, sizeof(blk->scales));  // scales and mins 63
      for (uint8_t& q : blk->qs) q = bit(rng) ? 0xFF : 0x00;
    } else if (t == DType::Q5_K) {
      auto* blk = reinterpret_cast<quant::BlockQ5_K*>(row) + b;
      std::memset(blk->scales, 0xFF, sizeof(blk->scales));  // scales and mins 63
      for (uint8_t& q : blk->qs) q = bit(rng) ? 0xFF : 0x00;
      for (uint8_t& q : blk->qh) q = bit(rng) ? 0xFF : 0x00;  // q 31 or 0
    } else if (t == DType::Q6_K) {
      auto* blk = reinterpret_cast<quant::BlockQ6_K*>(row) + b;
      for (int8_t& s : blk->scales) s = bit(rng) ? 127 : -128;
      for (uint8_t& q : blk->ql) q = bit(rng) ? 0xFF : 0x00;
      for (uint8_t& q : blk->qh) q = bit(rng) ? 0xFF : 0x00;  // q 63 or 0 (q - 32 = 31 or -32)
    }
  }
}

// Activation rows of type Q8_0 / Q8_K with every quant at an extreme (Q8_0
// as quantize_act makes it, |q| <= 127; Q8_K down to -128, which the
// format allows), the bsums kept right.
void saturate_act(DType at, uint8_t* row, int64_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> bit(0, 1);
  if (at == DType::Q8_0) {
    for (int64_t b = 0; b < n / quant::kQK; ++b)
      for (int8_t& q : (reinterpret_cast<quant::BlockQ8_0*>(row) + b)->qs) q = bit(rng) ? 127 : -127;
    return;
  }
  for (int64_t b = 0; b < n / quant::kQK_K; ++b) {
    quant::BlockQ8_K blk;
    std::memcpy(&blk, row + size_t(b) * sizeof(blk), sizeof(blk));
    for (int8_t& q : blk.qs) q = bit(rng) ? 127 : -128;
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += blk.qs[16 * g + i];
      blk.bsums[g] = int16_t(s);
    }
    std::memcpy(row + size_t(b) * sizeof(blk), &blk, sizeof(blk));
  }
}

struct Data {
  int64_t K = 0, N = 0;
  std::vector<uint8_t> w, packed, act;
  size_t wstride = 0, astride = 0, gb = 0;
};

Data make(DType t, const Case& c, uint64_t seed, bool extreme = false) {
  Data d;
  d.K = c.blocks * block_of(t);
  d.N = int64_t(c.groups) * kRepackRows;
  std::mt19937 rng{static_cast<unsigned>(seed)};
  d.wstride = row_bytes(t, d.K) + 6;  // rows a stride apart, not packed
  d.w.assign(d.wstride * size_t(d.N), 0xAB);
  for (int64_t r = 0; r < d.N; ++r) {
    uint8_t* row = d.w.data() + size_t(r) * d.wstride;
    quant::random_fill(t, row, d.K, 0.0f, 0.02f, seed + uint64_t(r));
    if (extreme) saturate_row(t, row, d.K, rng);
  }
  d.gb = repacked_group_bytes(t, d.K);
  d.packed.assign(d.gb * size_t(c.groups), 0);
  repack_groups(t, d.w.data(), d.wstride, d.K, d.N, 0, c.groups, d.packed.data());
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const DType at = activation_type(t);
  d.astride = row_bytes(at, d.K) + 2;  // unaligned rows
  d.act.assign(d.astride * size_t(c.nr), 0);
  std::vector<float> x(static_cast<size_t>(d.K));
  for (int j = 0; j < c.nr; ++j) {
    for (float& v : x) v = nd(rng);
    if (j == 1) x[0] = 250.0f;  // an outlier: a coarse block scale
    uint8_t* row = d.act.data() + size_t(j) * d.astride;
    quantize_act(at, x.data(), row, d.K, SimdLevel::Reference);
    if (extreme) saturate_act(at, row, d.K, rng);
  }
  return d;
}

std::string name(DType t, const Data& d, const Case& c) {
  return std::string(dtype_name(t)) + " K " + std::to_string(d.K) + " groups " + std::to_string(c.groups) +
         " tokens " + std::to_string(c.nr);
}

// Every SIMD level up to the hardware's equals the reference bit for bit.
void expect_kernels_equal_reference(DType t, const Data& d, const Case& c) {
  const size_t ldy = size_t(d.N) + 3;
  std::vector<float> want(ldy * size_t(c.nr), -1.0f);
  repacked_tile_reference(t, d.K, d.packed.data(), d.gb, c.groups, d.act.data(), d.astride, c.nr, want.data(), ldy);
  for (SimdLevel l : {SimdLevel::Reference, SimdLevel::AVX2, SimdLevel::AVX512, SimdLevel::AVX512_VNNI}) {
    if (int(l) > int(hardware_simd_level())) continue;
    std::vector<float> got(want.size(), -1.0f);
    repacked_tile(t, l)(d.K, d.packed.data(), d.gb, c.groups, d.act.data(), d.astride, c.nr, got.data(), ldy);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
          << simd_level_name(l) << " element " << i << ": " << got[i] << " vs " << want[i];
  }
}

// The reference against a float64 product of the dequantized operands, and
// the file-layout kernel against the reference (their float orders differ).
void expect_reference_is_the_product(DType t, const Data& d, const Case& c, double file_tol) {
  const size_t ldy = size_t(d.N);
  std::vector<float> got(ldy * size_t(c.nr));
  repacked_tile_reference(t, d.K, d.packed.data(), d.gb, c.groups, d.act.data(), d.astride, c.nr, got.data(), ldy);
  std::vector<float> wf(static_cast<size_t>(d.K)), af(static_cast<size_t>(d.K));
  const QDotKernels file = qdot_kernels(t);
  for (int j = 0; j < c.nr; ++j) {
    dequantize_row(activation_type(t), d.act.data() + size_t(j) * d.astride, af.data(), d.K);
    for (int64_t r = 0; r < d.N; ++r) {
      dequantize_row(t, d.w.data() + size_t(r) * d.wstride, wf.data(), d.K);
      double s = 0, mag = 0;
      for (int64_t i = 0; i < d.K; ++i) {
        s += double(wf[size_t(i)]) * double(af[size_t(i)]);
        mag += std::fabs(double(wf[size_t(i)]) * double(af[size_t(i)]));
      }
      const float v = got[size_t(j) * ldy + size_t(r)];
      ASSERT_NEAR(double(v), s, 1e-6 * mag + 1e-30) << "row " << r << " token " << j;
      if (file_tol <= 0) continue;
      const float f = file.dot(d.K, d.w.data() + size_t(r) * d.wstride, d.act.data() + size_t(j) * d.astride);
      ASSERT_NEAR(double(f), double(v), file_tol * mag + 1e-30) << "row " << r << " token " << j;
    }
  }
}

TEST(Repack, EveryKernelEqualsTheReferenceBitForBit) {
  for (DType t : kTypes)
    for (const Case& c : kCases) {
      const Data d = make(t, c, 17 + uint64_t(c.blocks));
      SCOPED_TRACE(name(t, d, c));
      expect_kernels_equal_reference(t, d, c);
    }
}

TEST(Repack, EveryKernelEqualsTheReferenceOnExtremeQuants) {
  for (DType t : kTypes)
    for (const Case& c : {Case{3, 2, 8}, Case{16, 1, 5}}) {
      const Data d = make(t, c, 5 + uint64_t(c.blocks), true);
      SCOPED_TRACE(name(t, d, c));
      expect_kernels_equal_reference(t, d, c);
      expect_reference_is_the_product(t, d, c, 0);
    }
}

TEST(Repack, ReferenceEqualsAFloat64ProductAndTheFileLayoutKernels) {
  for (DType t : kTypes)
    for (const Case& c : kCases) {
      const Data d = make(t, c, 99 + uint64_t(c.blocks));
      SCOPED_TRACE(name(t, d, c));
      expect_reference_is_the_product(t, d, c, 2e-6);
    }
}

// N rows ending at a page no one may read: the last group's padding rows
// come out 0, the real rows as in a whole group, and repack_groups reads
// nothing past row N.
TEST(Repack, PaddedLastGroupReadsNoRowPastN) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  for (DType t : kTypes)
    for (int64_t N : {1, 5, 13}) {
      const Case c{3, int((N + kRepackRows - 1) / kRepackRows), 3};
      const Data full = make(t, Case{c.blocks, c.groups, c.nr}, 41);  // rows 0..8 groups - 1
      SCOPED_TRACE(name(t, full, c) + " N " + std::to_string(N));
      // Rows 0..N-1 of `full`, packed (no stride) so that the last ends at
      // a PROT_NONE page.
      const size_t rb = row_bytes(t, full.K), bytes = rb * size_t(N);
      const size_t span = (bytes + page - 1) / page * page;
      auto* map = static_cast<uint8_t*>(mmap(nullptr, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      ASSERT_NE(map, MAP_FAILED);
      ASSERT_EQ(mprotect(map + span, page, PROT_NONE), 0);
      uint8_t* w = map + span - bytes;
      for (int64_t r = 0; r < N; ++r) std::memcpy(w + size_t(r) * rb, full.w.data() + size_t(r) * full.wstride, rb);
      std::vector<uint8_t> packed(full.gb * size_t(c.groups), 0xCD);
      repack_groups(t, w, rb, full.K, N, 0, c.groups, packed.data());
      munmap(map, span + page);
      const size_t ldy = size_t(c.groups) * kRepackRows;
      for (SimdLevel l : {SimdLevel::Reference, SimdLevel::AVX2, SimdLevel::AVX512_VNNI}) {
        if (int(l) > int(hardware_simd_level())) continue;
        std::vector<float> got(ldy * size_t(c.nr), -1.0f), want(ldy * size_t(c.nr), -1.0f);
        repacked_tile(t, l)(full.K, packed.data(), full.gb, c.groups, full.act.data(), full.astride, c.nr, got.data(), ldy);
        repacked_tile(t, l)(full.K, full.packed.data(), full.gb, c.groups, full.act.data(), full.astride, c.nr,
                            want.data(), ldy);
        for (int j = 0; j < c.nr; ++j)
          for (size_t n = 0; n < ldy; ++n) {
            const float g = got[size_t(j) * ldy + n];
            if (int64_t(n) < N) ASSERT_EQ(g, want[size_t(j) * ldy + n]) << simd_level_name(l) << " row " << n;
            else ASSERT_EQ(g, 0.0f) << simd_level_name(l) << " padding row " << n;
          }
      }
    }
}

TEST(Repack, OnlyTypesWithALayout) {
  for (DType t : kTypes) {
    const int64_t b = block_of(t);
    EXPECT_TRUE(can_repack(t, b)) << dtype_name(t);
    EXPECT_TRUE(can_repack(t, 3 * b)) << dtype_name(t);
    EXPECT_FALSE(can_repack(t, b / 2 * 3)) << dtype_name(t);
    EXPECT_FALSE(can_repack(t, 0)) << dtype_name(t);
    EXPECT_NE(repacked_tile(t), nullptr) << dtype_name(t);
    // A group is 8 file rows plus at most 32 bytes a block.
    EXPECT_LE(repacked_group_bytes(t, 2 * b), 8 * row_bytes(t, 2 * b) + 2 * 32) << dtype_name(t);
  }
  for (DType t : {DType::F16, DType::F32, DType::Q4_1, DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q8_1}) {
    EXPECT_FALSE(can_repack(t, 256)) << dtype_name(t);
    EXPECT_EQ(repacked_tile(t), nullptr) << dtype_name(t);
    EXPECT_THROW(repacked_group_bytes(t, 256), std::exception) << dtype_name(t);
  }
  EXPECT_EQ(repacked_group_bytes(DType::Q4_0, 64), 2u * 144u);
  EXPECT_EQ(repacked_group_bytes(DType::Q5_0, 64), 2u * 8u * 22u);
  EXPECT_EQ(repacked_group_bytes(DType::Q4_K, 512), 2u * 1184u);
  EXPECT_EQ(repacked_group_bytes(DType::Q5_K, 512), 2u * 1440u);
  EXPECT_EQ(repacked_group_bytes(DType::Q6_K, 512), 2u * 8u * 210u);
  EXPECT_EQ(repacked_group_bytes(DType::Q8_0, 64), 2u * 8u * 34u);
}

}  // namespace
}  // namespace weir::cpu
