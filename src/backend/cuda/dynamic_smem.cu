#include <mutex>
#include <set>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_util.cuh"

namespace weir::cuda {

void allow_dynamic_smem(const void* kernel, int bytes) {
  static std::mutex m;
  static std::set<std::pair<const void*, int>> done;  // (kernel, device) with its limit raised
  int dev = 0;
  WEIR_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lk(m);
  if (done.count({kernel, dev})) return;
  WEIR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done.insert({kernel, dev});
}

}  // namespace weir::cuda
