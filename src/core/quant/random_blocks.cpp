#include "core/quant/random_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/half.h"
#include "core/quant/block_formats.h"

namespace weir::quant {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// xoshiro256+ (Blackman and Vigna): the low bits are slightly weaker than the
// high ones, which does not matter for random weights.
struct Rng {
  uint64_t s[4];
  explicit Rng(uint64_t seed) {
    for (uint64_t& x : s) x = splitmix64(seed);
  }
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t next() {
    const uint64_t r = s[0] + s[3];
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
  }
  void fill(uint8_t* p, size_t n) {
    for (; n >= 8; p += 8, n -= 8) {
      const uint64_t r = next();
      std::memcpy(p, &r, 8);
    }
    if (n) {
      const uint64_t r = next();
      std::memcpy(p, &r, n);
    }
  }
};

inline void put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
inline uint16_t get16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Uniform floats with the given mean and std: two per random 64-bit word.
template <typename Store>
void fill_uniform(Rng& rng, int64_t n, float mean, float std, Store store) {
  const float a = std * std::sqrt(3.0f) * 0x1p-31f;  // int32 -> [-sqrt(3) std, sqrt(3) std)
  int64_t i = 0;
  for (; i + 1 < n; i += 2) {
    const uint64_t r = rng.next();
    store(i, mean + float(int32_t(uint32_t(r))) * a);
    store(i + 1, mean + float(int32_t(uint32_t(r >> 32))) * a);
  }
  if (i < n) store(i, mean + float(int32_t(uint32_t(rng.next()))) * a);
}

// Variances of uniform integers: E[q^2] for q uniform over [lo, hi].
constexpr double mean_sq(int lo, int hi) {
  const double m = (lo + hi) / 2.0, w = hi - lo + 1;
  return m * m + (w * w - 1) / 12.0;
}

// Fills nb blocks of type B with random bytes, then lets fix() set the
// scale fields of each block (reading its own random bytes for choices).
template <typename B, typename Fix>
void gen_blocks(Rng& rng, uint8_t* dst, int64_t nb, Fix fix) {
  rng.fill(dst, size_t(nb) * sizeof(B));
  for (int64_t b = 0; b < nb; ++b) fix(dst + b * int64_t(sizeof(B)));
}

// Legacy formats with x = d * (q - off): random sign of d per block.
template <typename B>
void gen_signed_d(Rng& rng, uint8_t* dst, int64_t nb, float d) {
  const uint16_t dh = f32_to_fp16(d);
  gen_blocks<B>(rng, dst, nb, [&](uint8_t* p) {
    put16(p + offsetof(B, d), uint16_t(dh | (get16(p + offsetof(B, d)) & 0x8000)));
  });
}

// Legacy formats with x = d * q + m: m = -d * mean(q).
template <typename B>
void gen_with_min(Rng& rng, uint8_t* dst, int64_t nb, float d, float q_mean) {
  const uint16_t dh = f32_to_fp16(d);
  const uint16_t mh = f32_to_fp16(-fp16_to_f32(dh) * q_mean);
  gen_blocks<B>(rng, dst, nb, [&](uint8_t* p) {
    put16(p + offsetof(B, d), dh);
    put16(p + offsetof(B, m), mh);
  });
}

// q4_K / q5_K: sub-block scales sc uniform in [32, 63], min mn = sc, and
// dmin = q_mean * d, so x = d * sc * (q - q_mean).
template <typename B>
void gen_k_with_min(Rng& rng, uint8_t* dst, int64_t nb, float d, float q_mean) {
  const uint16_t dh = f32_to_fp16(d);
  const uint16_t mh = f32_to_fp16(fp16_to_f32(dh) * q_mean);
  gen_blocks<B>(rng, dst, nb, [&](uint8_t* p) {
    put16(p + offsetof(B, d), dh);
    put16(p + offsetof(B, dmin), mh);
    uint8_t* s = p + offsetof(B, scales);
    uint8_t sc[8];
    for (int j = 0; j < 8; ++j) sc[j] = uint8_t(32 + ((s[j] ^ (s[8 + j % 4] >> (j / 4 * 4))) & 31));
    // Packing (inverse of unpack_scale_min_k4) with mn[j] = sc[j].
    for (int j = 0; j < 4; ++j) {
      s[j] = uint8_t((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
      s[j + 4] = uint8_t((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
      s[j + 8] = uint8_t((sc[j + 4] & 15) | ((sc[j + 4] & 15) << 4));
    }
  });
}

// E[v^2] of a value table indexed by a uniform 4-bit quant.
constexpr double table_mean_sq(const int8_t (&v)[16]) {
  double s = 0;
  for (int8_t x : v) s += double(x) * x;
  return s / 16;
}

}  // namespace

uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b * 0xd1b54a32d192ed03ull);
  return splitmix64(x);
}

bool can_randomize(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16:
    case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1: case DType::Q8_0:
    case DType::Q2_K: case DType::Q3_K: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
    case DType::IQ4_NL: case DType::IQ4_XS: case DType::MXFP4:
      return true;
    default:
      return false;
  }
}

void random_fill(DType t, void* dst_v, int64_t n, float mean, float std, uint64_t seed) {
  const DTypeTraits& tr = traits(t);
  if (!can_randomize(t)) throw Error(std::string("cannot generate random data of type ") + tr.name);
  if (n % tr.block_size != 0)
    throw Error(std::string("random ") + tr.name + " data: " + std::to_string(n) +
                " elements is not a multiple of the block size " + std::to_string(tr.block_size));
  const bool is_float = t == DType::F32 || t == DType::F16 || t == DType::BF16;
  if (!is_float && mean != 0.0f)
    throw Error(std::string("random ") + tr.name + " data must have mean 0");
  Rng rng(seed);
  uint8_t* dst = static_cast<uint8_t*>(dst_v);
  const int64_t nb = n / tr.block_size;
  const double s = std;
  switch (t) {
    case DType::F32:
      fill_uniform(rng, n, mean, std, [&](int64_t i, float x) { std::memcpy(dst + 4 * i, &x, 4); });
      return;
    case DType::F16:
    case DType::BF16: {
      // Converting each value is slow; instead pick each one from a table of
      // 4096 evenly spaced levels of the uniform distribution (12 random
      // bits per value, 5 values per random word).
      uint16_t table[4096];
      const float a = std * std::sqrt(3.0f);
      for (int i = 0; i < 4096; ++i) {
        const float x = mean + a * (float(2 * i + 1) / 4096.0f - 1.0f);
        table[i] = t == DType::F16 ? f32_to_fp16(x) : f32_to_bf16(x);
      }
      int64_t i = 0;
      for (; i + 5 <= n; i += 5) {
        const uint64_t r = rng.next();
        for (int k = 0; k < 5; ++k) put16(dst + 2 * (i + k), table[(r >> (12 * k)) & 4095]);
      }
      for (const uint64_t r = rng.next(); i < n; ++i) put16(dst + 2 * i, table[(r >> (12 * (i % 5))) & 4095]);
      return;
    }
    case DType::Q4_0:
      return gen_signed_d<BlockQ4_0>(rng, dst, nb, float(s / std::sqrt(mean_sq(-8, 7))));
    case DType::Q5_0:
      return gen_signed_d<BlockQ5_0>(rng, dst, nb, float(s / std::sqrt(mean_sq(-16, 15))));
    case DType::Q8_0:
      return gen_signed_d<BlockQ8_0>(rng, dst, nb, float(s / std::sqrt(mean_sq(-128, 127))));
    case DType::Q4_1:
      return gen_with_min<BlockQ4_1>(rng, dst, nb, float(s / std::sqrt(mean_sq(-8, 7) - 0.25)), 7.5f);
    case DType::Q5_1:
      return gen_with_min<BlockQ5_1>(rng, dst, nb, float(s / std::sqrt(mean_sq(-16, 15) - 0.25)), 15.5f);
    case DType::Q4_K:  // q in [0, 15]: variance 21.25
      return gen_k_with_min<BlockQ4_K>(rng, dst, nb, float(s / std::sqrt(mean_sq(32, 63) * 21.25)), 7.5f);
    case DType::Q5_K:  // q in [0, 31]: variance 85.25
      return gen_k_with_min<BlockQ5_K>(rng, dst, nb, float(s / std::sqrt(mean_sq(32, 63) * 85.25)), 15.5f);
    case DType::Q2_K: {
      // Scale nibble sc in [8, 15], min nibble = sc, dmin = 1.5 d:
      // x = d * sc * (q - 1.5), q in [0, 3] (variance 1.25).
      const uint16_t dh = f32_to_fp16(float(s / std::sqrt(mean_sq(8, 15) * 1.25)));
      const uint16_t mh = f32_to_fp16(fp16_to_f32(dh) * 1.5f);
      return gen_blocks<BlockQ2_K>(rng, dst, nb, [&](uint8_t* p) {
        put16(p + offsetof(BlockQ2_K, d), dh);
        put16(p + offsetof(BlockQ2_K, dmin), mh);
        uint8_t* sc = p + offsetof(BlockQ2_K, scales);
        for (int j = 0; j < 16; ++j) {
          const uint8_t v = uint8_t(8 + (sc[j] & 7));
          sc[j] = uint8_t(v | (v << 4));
        }
      });
    }
    case DType::Q3_K: {
      // Signed 6-bit scales of magnitude [16, 31] and random sign; q in
      // [-4, 3] (E[q^2] = 5.5).
      const uint16_t dh = f32_to_fp16(float(s / std::sqrt(mean_sq(16, 31) * mean_sq(-4, 3))));
      return gen_blocks<BlockQ3_K>(rng, dst, nb, [&](uint8_t* p) {
        put16(p + offsetof(BlockQ3_K, d), dh);
        uint8_t* sc = p + offsetof(BlockQ3_K, scales);
        uint8_t v[16];
        for (int j = 0; j < 16; ++j) {
          const uint8_t r = j < 12 ? sc[j] : uint8_t(sc[j - 12] >> 4 ^ sc[j - 8] << 1);
          const int mag = 16 + (r & 15);
          v[j] = uint8_t(32 + ((r & 0x80) ? -mag : mag));  // stored biased by 32
        }
        std::memset(sc, 0, 12);
        for (int j = 0; j < 16; ++j) {
          sc[j % 8] = uint8_t(sc[j % 8] | (v[j] & 15) << (4 * (j / 8)));
          sc[8 + j % 4] = uint8_t(sc[8 + j % 4] | (v[j] >> 4) << (2 * (j / 4)));
        }
      });
    }
    case DType::Q6_K: {
      // int8 sub-block scales of magnitude [16, 31] and random sign; q - 32
      // in [-32, 31].
      const uint16_t dh = f32_to_fp16(float(s / std::sqrt(mean_sq(16, 31) * mean_sq(-32, 31))));
      return gen_blocks<BlockQ6_K>(rng, dst, nb, [&](uint8_t* p) {
        put16(p + offsetof(BlockQ6_K, d), dh);
        uint8_t* sc = p + offsetof(BlockQ6_K, scales);
        for (int j = 0; j < 16; ++j) {
          const int mag = 16 + (sc[j] & 15);
          sc[j] = uint8_t(int8_t((sc[j] & 0x80) ? -mag : mag));
        }
      });
    }
    case DType::IQ4_NL:  // the table's mean (-5.875) cancels by the sign of d
      return gen_signed_d<BlockIQ4_NL>(rng, dst, nb, float(s / std::sqrt(table_mean_sq(kIQ4NLValues))));
    case DType::IQ4_XS: {
      // Sub-block scales ls - 32 of magnitude [16, 31] and random sign.
      const uint16_t dh = f32_to_fp16(float(s / std::sqrt(mean_sq(16, 31) * table_mean_sq(kIQ4NLValues))));
      return gen_blocks<BlockIQ4_XS>(rng, dst, nb, [&](uint8_t* p) {
        put16(p + offsetof(BlockIQ4_XS, d), dh);
        uint8_t* sl = p + offsetof(BlockIQ4_XS, scales_l);
        const uint16_t r = get16(p + offsetof(BlockIQ4_XS, scales_h));  // random bits to choose from
        uint16_t sh = 0;
        for (int j = 0; j < 8; ++j) {
          const int mag = 16 + ((sl[j / 2] >> (4 * (j % 2))) & 15);
          const int v = 32 + (((r >> j) & 1) ? -mag : mag);  // stored biased by 32, in [1, 63]
          sh = uint16_t(sh | (v >> 4) << (2 * j));
          sl[j / 2] = uint8_t((sl[j / 2] & ~(15 << (4 * (j % 2)))) | (v & 15) << (4 * (j % 2)));
        }
        put16(p + offsetof(BlockIQ4_XS, scales_h), sh);
      });
    }
    case DType::MXFP4: {
      // The table is symmetric (mean 0). The scale is a power of two: each
      // block takes 2^lo or 2^(lo + 1) (by its own random e byte) in the
      // proportion that makes the expected square std^2 / E[v^2].
      const double want = s / std::sqrt(table_mean_sq(kMXFP4Values));  // scale 2^(e - 128)
      const double lo = want > 0 ? std::floor(std::log2(want)) : -128;
      const double up = std::exp2(2 * lo) > 0 ? (want * want / std::exp2(2 * lo) - 1) / 3 : 0;  // P(lo + 1)
      const uint8_t e0 = uint8_t(std::clamp(lo + 128, 0.0, 253.0));
      const int threshold = int(std::lround(up * 256));
      return gen_blocks<BlockMXFP4>(rng, dst, nb, [&](uint8_t* p) {
        uint8_t& e = p[offsetof(BlockMXFP4, e)];
        e = uint8_t(e0 + (int(e) < threshold ? 1 : 0));
      });
    }
    default:
      break;
  }
  throw Error(std::string("cannot generate random data of type ") + tr.name);
}

}  // namespace weir::quant
