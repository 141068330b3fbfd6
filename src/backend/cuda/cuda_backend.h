// The CUDA backend: one GPU, one compute stream (its queue) and a copy
// stream. Weights are copied to device memory at plan(), once per host
// address while planned graphs use them (shared by those graphs; freed when
// the last one is released, since the host memory may then be reused);
// each graph's inputs and intermediates live in a device arena planned once.
// A graph runs as its launch plan (plan/launch_plan.h), launched by
// run_launches; from its second run on, the launches are recorded into a
// CUDA graph once and replayed, so a decode step costs one launch (plus the
// input copies) on the host.
//
// Files: this one (set-up, weights, planning), cuda_queue (queues, events),
// device_memory (buffers), run_launches (the visit over a plan),
// graph_capture (recording and replaying), launch_profiler.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/launch_profiler.h"
#include "backend/cuda/plan/launch_plan.h"
#include "backend/memory_ranges.h"
#include "backend/weight_copies.h"
#include "backend/registry.h"
#include "core/tensor.h"

namespace weir::cuda {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaOptions& o);
  ~CudaBackend() override;

  std::string name() const override { return name_; }
  Device device() const override { return {Device::Kind::Cuda, device_}; }
  bool supports(const Tensor& node) const override;
  bool host_visible_memory() const override { return false; }
  Queue& queue() override;
  Queue& copy_queue() override;
  // Device memory that is ours: buffers from alloc(), arenas, weight copies.
  bool owns(const void* p) const override;
  void plan(Graph& g) override;
  void prepare_run(Graph& g) override;
  size_t planned_bytes(const Graph& g) const override;
  void release(const Graph& g) override;
  const BackendStats& stats() const override { return stats_; }
  std::unique_ptr<Buffer> alloc(size_t bytes) override;
  std::unique_ptr<Buffer> alloc_host(size_t bytes) override;
  bool register_host_memory(const void* p, size_t n) override;
  std::unique_ptr<Buffer> alloc_weight(size_t bytes) override;
  void adopt_weight(const void* host, size_t bytes, std::unique_ptr<Buffer> w) override;
  void forget_weights(const void* begin, size_t n) override;

  int device_index() const { return device_; }
  const cudaDeviceProp& props() const { return prop_; }
  // Device bytes held by weights copied at plan().
  size_t weight_bytes() const { return weights_.bytes(); }

 private:
  // A planned graph: its launches, its activation arena and its recording.
  struct GraphPlan {
    LaunchPlan launches;
    void* arena = nullptr;
    size_t bytes = 0;
    cudaGraphExec_t exec = nullptr;
    uint64_t exec_generation = 0;  // shared_generation_ when recorded
    int runs = 0;
    bool profiled = false;
    ~GraphPlan();
  };
  void run_graph(Graph& g);       // graph_capture.cpp
  void record(GraphPlan& p);      // graph_capture.cpp
  OpCtx op_context() const;       // the memory and handles every launch gets
  void upload_weight(const Tensor& t);
  void drop_plan(const Graph* g);  // frees its arena and its hold on weights
  // Grows one of the buffers every graph shares to at least bytes.
  void grow_shared(SharedDeviceBuffer& b, size_t bytes);

  CudaOptions opts_;
  int device_ = 0;
  cudaDeviceProp prop_{};
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;  // the copy queue's
  cublasHandle_t cublas_ = nullptr;
  void* cublas_workspace_ = nullptr;
  std::unique_ptr<Queue> queue_, copy_queue_;
  BackendStats stats_;
  MemoryRanges owned_;  // device allocations: buffers, arenas, weights
  // Device copies of weights, by host address, held by the plans that read
  // them and freed with the last (the host memory may be reused).
  WeightCopies weights_{true};
  std::vector<void*> registered_;  // host ranges registered (cudaHostRegister)
  // Memory every graph shares, one launch at a time: per-launch temporary
  // memory (OpCtx::scratch), deferred norms (OpCtx::deferred_norm) and the
  // GLU's 8-bit blocks (OpCtx::glu_q8).
  SharedDeviceBuffer scratch_, deferred_norm_, glu_q8_;
  uint64_t shared_generation_ = 0;  // bumped when one of them moves: recordings go stale
  std::unordered_map<const Graph*, std::unique_ptr<GraphPlan>> plans_;
  std::unique_ptr<LaunchProfiler> profiler_;  // CudaOptions::profile
};

}  // namespace weir::cuda
