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

// Whether the current device is a Hopper or later (compute capability 9
// or more), asked of the runtime once: the features that come with it
// (programmatic dependent launch, bulk copies, thread-block clusters) ask
// this.
inline bool hopper_or_later() {
  static const bool on = [] {
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

// Whether this device can launch with programmatic dependent launch.
inline bool pdl_supported() { return hopper_or_later(); }

// Whether the kernels launched now take PDL: set by the backend for each
// node it launches (CudaOptions::pdl, pdl_off_ops, pdl_nodes; the device's
// support); off elsewhere (a kernel test's direct launch).
inline thread_local bool t_pdl = false;

// CudaOptions::pdl_off_ops ("op,op"): bisecting by op found the launch
// whose timing exposed a race (a fused norm over its own input,
// docs/perf.md).
inline bool pdl_off_for(Op op, const std::string& list) {
  return !list.empty() && ("," + list + ",").find("," + std::string(op_name(op)) + ",") != std::string::npos;
}
// CudaOptions::pdl_nodes ("LO-HI,..."): only those plan nodes launch with it.
inline bool pdl_off_for_node(size_t i, const std::string& spec) {
  bool any = false;
  for (const char* s = spec.c_str(); s && *s;) {
    long lo = 0, hi = -1;
    if (std::sscanf(s, "%ld-%ld", &lo, &hi) == 2) {
      any = true;
      if (long(i) >= lo && long(i) <= hi) return false;
    }
    s = std::strchr(s, ',');
    if (s) ++s;
  }
  return any;
}

}  // namespace weir::cuda
