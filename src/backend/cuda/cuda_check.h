// Error checks for CUDA runtime and cuBLAS calls: a failure becomes a
// weir::Error naming the call, the error and where it was made.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace weir::cuda {

[[noreturn]] void fail_cuda(cudaError_t e, const char* what, const char* file, int line);
[[noreturn]] void fail_cublas(cublasStatus_t s, const char* what, const char* file, int line);

inline void check(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess) fail_cuda(e, what, file, line);
}
inline void check(cublasStatus_t s, const char* what, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS) fail_cublas(s, what, file, line);
}

}  // namespace weir::cuda

#define WEIR_CUDA_CHECK(expr) ::weir::cuda::check((expr), #expr, __FILE__, __LINE__)
// After a kernel launch: launch errors (bad configuration) surface here.
#define WEIR_CUDA_CHECK_LAUNCH() ::weir::cuda::check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
