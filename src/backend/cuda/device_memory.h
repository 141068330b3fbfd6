// The CUDA backend's device and pinned memory: buffers handed out by
// alloc() and alloc_host(), and the device buffers that every graph of the
// backend shares (scratch, deferred norms, the GLU's 8-bit blocks), grown
// when a plan needs more.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "backend/backend.h"
#include "backend/memory_ranges.h"

namespace weir::cuda {

// Device memory from alloc(): zero-filled, and known to the backend as its
// own while it lives (owned), so plan() uses it in place instead of copying
// it. Everything that writes device memory goes on the backend's stream: it
// is a non-blocking stream, not ordered after work on the legacy default
// stream (a cudaMemset there could land after our kernels' writes, a
// cudaMemcpy from pageable memory returns before its DMA is done).
class DeviceBuffer final : public Buffer {
 public:
  // Zero-filled from zero_from on (the whole buffer by default), on stream.
  DeviceBuffer(size_t n, MemoryRanges* owned, cudaStream_t stream, size_t zero_from = 0);
  ~DeviceBuffer() override;

 private:
  MemoryRanges* owned_;
};

// Pinned host memory: the device copies to and from it asynchronously.
class PinnedBuffer final : public Buffer {
 public:
  explicit PinnedBuffer(size_t n);
  ~PinnedBuffer() override;
};

// Device memory shared by every graph of a backend, one launch at a time.
class SharedDeviceBuffer {
 public:
  SharedDeviceBuffer() = default;
  SharedDeviceBuffer(const SharedDeviceBuffer&) = delete;
  SharedDeviceBuffer& operator=(const SharedDeviceBuffer&) = delete;
  ~SharedDeviceBuffer();
  // At least `bytes`: waits for stream and reallocates if smaller. Returns
  // whether the memory moved (recorded CUDA graphs that use it go stale).
  bool grow(size_t bytes, cudaStream_t stream);
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// What CUDA knows of p, for error messages.
std::string describe_pointer(const void* p);

}  // namespace weir::cuda
