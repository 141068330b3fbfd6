#include "backend/cuda/cuda_queue.h"

#include <string>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_memory.h"
#include "core/error.h"

namespace weir::cuda {

CudaEvent::CudaEvent(cudaStream_t s, BackendStats& stats) : stats_(stats) {
  WEIR_CUDA_CHECK(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming));
  WEIR_CUDA_CHECK(cudaEventRecord(e_, s));
}
CudaEvent::~CudaEvent() { cudaEventDestroy(e_); }
void CudaEvent::wait() {
  ++stats_.host_waits;
  WEIR_CUDA_CHECK(cudaEventSynchronize(e_));
}
bool CudaEvent::is_done() const { return cudaEventQuery(e_) == cudaSuccess; }

CudaQueue::CudaQueue(int device, cudaStream_t s, BackendStats& stats, std::function<void(Graph&)> run_graph)
    : device_(device), s_(s), stats_(stats), run_graph_(std::move(run_graph)) {}

void CudaQueue::run(Graph& g) {
  if (!run_graph_) throw Error("cuda backend: graphs run on the compute queue, not the copy queue");
  run_graph_(g);
}

void CudaQueue::copy_to_device(void* dst, const void* src, size_t n) {
  WEIR_CUDA_CHECK(cudaSetDevice(device_));
  const cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s_);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error("CUDA: copying " + std::to_string(n) + " bytes from " + describe_pointer(src) + " to " +
                describe_pointer(dst) + " on GPU " + std::to_string(device_) + ": " + cudaGetErrorString(e));
  }
}

void CudaQueue::copy_to_device_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                                  size_t rows) {
  WEIR_CUDA_CHECK(cudaSetDevice(device_));
  WEIR_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyHostToDevice, s_));
}

void CudaQueue::copy_to_host(void* dst, const void* src, size_t n) {
  WEIR_CUDA_CHECK(cudaSetDevice(device_));
  WEIR_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s_));
}

void CudaQueue::copy_on_device(void* dst, const void* src, size_t n) {
  WEIR_CUDA_CHECK(cudaSetDevice(device_));
  WEIR_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s_));
}

std::unique_ptr<Event> CudaQueue::record() {
  WEIR_CUDA_CHECK(cudaSetDevice(device_));
  return std::make_unique<CudaEvent>(s_, stats_);
}

void CudaQueue::wait_event(Event& e) {
  if (auto* ce = dynamic_cast<CudaEvent*>(&e)) {
    WEIR_CUDA_CHECK(cudaSetDevice(device_));
    WEIR_CUDA_CHECK(cudaStreamWaitEvent(s_, ce->get(), 0));
  } else if (!e.is_host_event()) {
    e.wait();
  }
}

void CudaQueue::synchronize() {
  ++stats_.host_waits;
  WEIR_CUDA_CHECK(cudaStreamSynchronize(s_));
}

}  // namespace weir::cuda
