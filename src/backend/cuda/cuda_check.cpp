#include "backend/cuda/cuda_check.h"

#include <string>

#include "core/error.h"

namespace weir::cuda {

void fail_cuda(cudaError_t e, const char* what, const char* file, int line) {
  throw Error(std::string("CUDA: ") + what + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
              ") at " + file + ":" + std::to_string(line));
}

void fail_cublas(cublasStatus_t s, const char* what, const char* file, int line) {
  throw Error(std::string("cuBLAS: ") + what + " failed: " + cublasGetStatusName(s) + " (" +
              cublasGetStatusString(s) + ") at " + file + ":" + std::to_string(line));
}

}  // namespace weir::cuda
