// The CUDA backend: one GPU, one stream (its queue). Weights are copied to
// device memory at plan(), once per host address while planned graphs use
// them (shared by those graphs; freed when the last one is released, since
// the host memory may then be reused for something else);
// each graph's inputs and intermediates live in a device arena planned once;
// kernels are the launchers of cuda_ops.h. From a graph's second run on,
// its kernels are recorded into a CUDA graph once and replayed, so a decode
// step costs one launch (plus the input copies) on the host.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
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
  friend class CudaQueue;
  struct Plan;
  void run_graph(Graph& g);
  void record(Plan& p);
  void launch_nodes(Plan& p, size_t begin, size_t end);
  void upload_weight(const Tensor& t);
  void drop_plan(const Graph* g);  // frees its arena and its hold on weights
  // Grows *mem (device memory shared by all graphs) to at least bytes.
  void ensure(void** mem, size_t* have, size_t bytes);
  void profile_plan(Plan& p);

  void print_profile() const;

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
  void* scratch_ = nullptr;  // per-node temporary memory, shared by all graphs
  size_t scratch_bytes_ = 0;
  void* fold_ = nullptr;  // folded norms' 8-bit x and sums (OpCtx::fold)
  size_t fold_bytes_ = 0;
  void* hand_ = nullptr;  // 8-bit x handed from one launch to the next (OpCtx::hand)
  size_t hand_bytes_ = 0;
  uint64_t scratch_generation_ = 0;  // bumped when scratch, fold or hand move: recordings go stale
  std::unordered_map<const Graph*, std::unique_ptr<Plan>> plans_;
  // WEIR_CUDA_PROFILE=1: at each graph's first replay, the kernel time of
  // every node (profile_plan), summed per kind of node; printed at destruction.
  bool profile_ = false;
  struct ProfileStat {
    uint64_t calls = 0;
    double ms = 0;
    double bytes = 0;  // weights read (mul_mat)
  };
  std::map<std::string, ProfileStat> profile_stats_;
};

}  // namespace weir::cuda
