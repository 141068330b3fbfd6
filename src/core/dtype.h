// Element types of tensors, numbered as GGUF/ggml number them, and the
// reference dequantizers for each block format.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace weir {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ4_NL = 20,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
  MXFP4 = 39,
};

struct DTypeTraits {
  const char* name;    // "q4_K" style, as ggml names it
  int64_t block_size;  // elements per block (1 for plain types)
  size_t type_size;    // bytes per block
  bool dequantizable;  // dequantize_row() supports it
};

// Traits of a raw GGUF type id; nullptr when the id is unknown.
const DTypeTraits* dtype_traits(uint32_t raw);
const DTypeTraits& traits(DType t);
inline const char* dtype_name(DType t) { return traits(t).name; }

// Bytes taken by n elements (n must be a multiple of the block size).
size_t row_bytes(DType t, int64_t n);

// Reference dequantization of n elements (a multiple of the block size)
// from src into dst. Throws weir::Error for types that have no dequantizer.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

}  // namespace weir
