// Random tensor data written directly in a GGUF block format, for synthetic
// models (weir synth). No floats are quantized: the quant bits of every block
// are random bytes (so every quant is uniform over its range, whatever the bit
// packing), and only the scale fields are then set, so that the dequantized
// values have mean 0 and the requested standard deviation. That makes it as
// fast as a random byte generator, which is what lets a 70B file be written
// at disk speed.
//
// How each format gets mean 0 (q uniform over its range in every case):
//   q4_0, q5_0, q8_0   d of random sign per block (the quants' own mean,
//                      -0.5, then cancels between blocks)
//   q4_1, q5_1         m = -d * mean(q)
//   q2_K, q4_K, q5_K   min of each sub-block = mean(q) * its scale (via dmin)
//   q3_K, q6_K         sub-block scales of random sign
//   iq4_nl             d of random sign per block
//   iq4_xs             sub-block scales of random sign
//   mxfp4              none needed: its value table is symmetric (its
//                      power-of-two scale is one of two neighbours per
//                      block, mixed to give the std)
// The sub-block scales are random too (q4_K / q5_K use the full 6 bits, so
// the packed high bits are exercised), and d is chosen from their expected
// square. Float types get uniform values (mean, std) and are the only types
// that take a non-zero mean (norm weights).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace weir::quant {

// Whether random_fill can produce type t.
bool can_randomize(DType t);

// Fills n elements (a multiple of t's block size) of type t at dst with
// random values of the given mean and standard deviation (in expectation).
// The output is a pure function of (t, n, mean, std, seed). Throws weir::Error
// for a type it cannot produce, or a non-zero mean for a quantized type.
void random_fill(DType t, void* dst, int64_t n, float mean, float std, uint64_t seed);

// A well-mixed 64-bit hash (splitmix64 finalizer), for deriving seeds.
uint64_t mix_seed(uint64_t a, uint64_t b);

}  // namespace weir::quant
