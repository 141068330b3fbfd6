// Whether kernels launch with programmatic dependent launch (host side;
// the device side is pdl_wait() in cuda_util.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace weir::cuda {

inline bool pdl_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("WEIR_CUDA_PDL");
    if (e && std::string(e) == "0") return false;
    int dev = 0, cc = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return cc >= 9;
  }();
  return on;
}

// Diagnostics: WEIR_CUDA_PDL_OFF_OPS, a comma-separated list of op names
// (op_name), launches those ops' kernels without programmatic dependent
// launch: bisecting by op and by node (below) found the launch whose
// timing exposed a race (a fused norm over its own input, docs/perf.md).
// The backend sets t_pdl_off for the node it launches.
inline bool pdl_off_for(Op op) {
  static const std::string list = [] {
    const char* e = std::getenv("WEIR_CUDA_PDL_OFF_OPS");
    return e ? "," + std::string(e) + "," : std::string();
  }();
  return !list.empty() && list.find("," + std::string(op_name(op)) + ",") != std::string::npos;
}
inline thread_local bool t_pdl_off = false;
// WEIR_CUDA_PDL_NODES=LO-HI[,LO-HI...]: only those plan nodes launch with it.
inline bool pdl_off_for_node(size_t i) {
  static const std::vector<std::pair<long, long>> ranges = [] {
    std::vector<std::pair<long, long>> v;
    const char* e = std::getenv("WEIR_CUDA_PDL_NODES");
    for (const char* s = e; s && *s;) {
      long lo = 0, hi = -1;
      if (std::sscanf(s, "%ld-%ld", &lo, &hi) == 2) v.emplace_back(lo, hi);
      s = std::strchr(s, ',');
      if (s) ++s;
    }
    return v;
  }();
  if (ranges.empty()) return false;
  for (const auto& [lo, hi] : ranges)
    if (long(i) >= lo && long(i) <= hi) return false;
  return true;
}

}  // namespace weir::cuda
