// The CUDA backend's queues and events: a queue is one of the backend's
// streams (the compute stream, which also runs graphs, or the copy stream);
// an event is a CUDA event recorded on it.
#pragma once
#include <cuda_runtime.h>

#include <functional>
#include <memory>

#include "backend/backend.h"

namespace weir::cuda {

class CudaEvent final : public Event {
 public:
  CudaEvent(cudaStream_t s, BackendStats& stats);
  ~CudaEvent() override;
  void wait() override;  // counted in stats.host_waits
  bool is_done() const override;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
  BackendStats& stats_;
};

class CudaQueue final : public Queue {
 public:
  // run_graph: how the compute queue runs a graph (empty: the copy queue,
  // which runs none).
  CudaQueue(int device, cudaStream_t s, BackendStats& stats, std::function<void(Graph&)> run_graph);
  void run(Graph& g) override;
  void copy_to_device(void* dst, const void* src, size_t n) override;
  void copy_to_device_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                         size_t rows) override;
  void copy_to_host(void* dst, const void* src, size_t n) override;
  // Device to device, this GPU's memory or a peer's (unified addressing).
  void copy_on_device(void* dst, const void* src, size_t n) override;
  std::unique_ptr<Event> record() override;
  // A CUDA event of any GPU: on the device; an inline queue's: nothing to
  // wait for; any other: on the host (counted by that event).
  void wait_event(Event& e) override;
  void synchronize() override;

 private:
  int device_;
  cudaStream_t s_;
  BackendStats& stats_;
  std::function<void(Graph&)> run_graph_;
};

}  // namespace weir::cuda
