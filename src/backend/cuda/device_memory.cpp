#include "backend/cuda/device_memory.h"

#include <cstdio>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace weir::cuda {

DeviceBuffer::DeviceBuffer(size_t n, MemoryRanges* owned, cudaStream_t stream, size_t zero_from) : owned_(owned) {
  const cudaError_t e = cudaMalloc(&data_, n ? n : 1);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error("cuda backend: cannot allocate " + std::to_string(n) + " bytes of device memory (" +
                cudaGetErrorString(e) + ")");
  }
  if (zero_from < n) WEIR_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(data_) + zero_from, 0, n - zero_from, stream));
  size_ = n;
  owned_->add(data_, n);
}

DeviceBuffer::~DeviceBuffer() {
  owned_->erase(data_);
  cudaFree(data_);
}

PinnedBuffer::PinnedBuffer(size_t n) {
  WEIR_CUDA_CHECK(cudaMallocHost(&data_, n ? n : 1));
  std::memset(data_, 0, n);
  size_ = n;
}

PinnedBuffer::~PinnedBuffer() { cudaFreeHost(data_); }

SharedDeviceBuffer::~SharedDeviceBuffer() {
  if (data_) cudaFree(data_);
}

bool SharedDeviceBuffer::grow(size_t bytes, cudaStream_t stream) {
  if (bytes <= bytes_) return false;
  WEIR_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (data_) cudaFree(data_);
  data_ = nullptr;
  bytes_ = 0;
  WEIR_CUDA_CHECK(cudaMalloc(&data_, bytes));
  bytes_ = bytes;
  return true;
}

std::string describe_pointer(const void* p) {
  char at[32];
  std::snprintf(at, sizeof at, "%p", p);
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return std::string(at) + " (unknown to CUDA)";
  }
  switch (a.type) {
    case cudaMemoryTypeDevice: return std::string(at) + " (GPU " + std::to_string(a.device) + " memory)";
    case cudaMemoryTypeHost: return std::string(at) + " (pinned host memory)";
    case cudaMemoryTypeManaged: return std::string(at) + " (managed memory)";
    default: return std::string(at) + " (host memory, not pinned)";
  }
}

}  // namespace weir::cuda
