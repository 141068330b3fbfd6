// 8-bit KV cache rows (GGUF's q8_0 blocks: per 32 values a half scale
// d = max|x| / 127, then 32 int8 quants q = round(x / d), ties away from
// zero) written and read by the tests on their own, from the format, to
// check what the backends write into an 8-bit cache and read from it.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/half.h"

namespace weir::test {

constexpr size_t kQ8Block = 34;  // bytes a block: the half scale, 32 quants

// x (a multiple of 32 values) as blocks back to back.
inline std::vector<uint8_t> q8_0_encode(const std::vector<float>& x) {
  std::vector<uint8_t> out(x.size() / 32 * kQ8Block);
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0.0f;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = f32_to_fp16(d);
    uint8_t* p = out.data() + b * kQ8Block;
    std::memcpy(p, &dh, 2);
    for (size_t j = 0; j < 32; ++j) p[2 + j] = uint8_t(int8_t(std::clamp(std::round(x[b * 32 + j] * id), -127.0f, 127.0f)));
  }
  return out;
}

// Element i of a run of blocks.
inline float q8_0_at(const uint8_t* blocks, int64_t i) {
  const uint8_t* p = blocks + size_t(i / 32) * kQ8Block;
  uint16_t dh;
  std::memcpy(&dh, p, 2);
  return fp16_to_f32(dh) * float(int8_t(p[2 + i % 32]));
}

}  // namespace weir::test
