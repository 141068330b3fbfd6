// Small helpers shared by the CPU kernels (ops_*.cpp only; not an interface).
#pragma once
#include <cstdint>
#include <string>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

namespace weir::cpu {

// Errors found while checking a node's operands: every thread finds the same
// one, thread 0 throws weir::Error and the others return without writing.
// Call as `return fail(c, "...")` from a kernel.
inline void fail(const OpContext& c, const std::string& msg) {
  if (c.ith == 0) throw Error(msg);
}

// Flat row r (0 .. n_rows-1) of t, walking ne[1], then ne[2], then ne[3].
template <typename T = float>
inline T* flat_row(const Tensor& t, int64_t r) {
  const int64_t i1 = r % t.ne[1];
  const int64_t i2 = (r / t.ne[1]) % t.ne[2];
  const int64_t i3 = r / (t.ne[1] * t.ne[2]);
  return t.row_ptr<T>(i1, i2, i3);
}

// This thread's share [r0, r1) of n items.
inline void thread_range(int64_t n, const OpContext& c, int64_t* r0, int64_t* r1) {
  *r0 = n * c.ith / c.nth;
  *r1 = n * (c.ith + 1) / c.nth;
}

inline std::string shape_str(const Tensor& t) {
  return t.name + "[" + std::to_string(t.ne[0]) + "," + std::to_string(t.ne[1]) + "," +
         std::to_string(t.ne[2]) + "," + std::to_string(t.ne[3]) + "]";
}

}  // namespace weir::cpu
