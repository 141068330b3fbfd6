// Helpers for tests of CUDA kernels: skip without a GPU, device buffers.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace weir::cuda::test {

// True when a CUDA device can be used; tests call WEIR_REQUIRE_GPU() first.
inline bool have_gpu(std::string* why = nullptr) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device";
    cudaGetLastError();  // clear the sticky-free error state
    return false;
  }
  return true;
}

#define WEIR_REQUIRE_GPU()                                       \
  do {                                                           \
    std::string why_;                                            \
    if (!::weir::cuda::test::have_gpu(&why_)) GTEST_SKIP() << "no GPU: " << why_; \
  } while (0)

inline void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Device memory, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : n_(n) { ok(cudaMalloc(&p_, n ? n : 1), "cudaMalloc"); }
  template <class T>
  explicit DeviceBuffer(const std::vector<T>& v) : DeviceBuffer(v.size() * sizeof(T)) {
    upload(v.data(), v.size() * sizeof(T));
  }
  ~DeviceBuffer() {
    if (p_) cudaFree(p_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  void* get() const { return p_; }
  size_t size() const { return n_; }
  void upload(const void* src, size_t n) { ok(cudaMemcpy(p_, src, n, cudaMemcpyHostToDevice), "upload"); }
  template <class T>
  std::vector<T> download() const {
    std::vector<T> v(n_ / sizeof(T));
    ok(cudaMemcpy(v.data(), p_, v.size() * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return v;
  }
  // Every byte set to b (0xFF poisons floats with NaN), to see unwritten output.
  void fill(int b) { ok(cudaMemset(p_, b, n_), "cudaMemset"); }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace weir::cuda::test
