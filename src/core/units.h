// Small helpers for messages and timings: bytes as GiB, seconds since a
// moment.
#pragma once
#include <chrono>
#include <cstdio>
#include <string>

namespace weir {

// "1.25 GiB"
inline std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / double(1 << 30));
  return buf;
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace weir
