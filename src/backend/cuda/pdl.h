// Whether kernels launch with programmatic dependent launch (host side;
// the device side is pdl_wait() in cuda_util.cuh).
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/plan/kernel_rules.h"  // pdl_off_for, pdl_off_for_node

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

// Where a kernel launches (launch_kernel, cuda_util.cuh): its stream, and
// whether with programmatic dependent launch, as the caller chose
// (OpCtx::launch_stream(): the backend's choice for the launch, OpCtx::pdl;
// a kernel test's direct launch: false). No conversion from a bare stream,
// so every launch says which.
struct LaunchStream {
  cudaStream_t stream;
  bool pdl;
};

}  // namespace weir::cuda
