// The CPU backend: runs graphs on a persistent thread pool with buffers
// planned once per graph (intermediate tensors share memory when their
// lifetimes do not overlap).
#pragma once
#include <memory>
#include <unordered_map>

#include "backend/backend.h"
#include "backend/cpu/thread_pool.h"

namespace weir {

struct CpuOptions {
  // Round activations before quantized matrix products the way llama.cpp's
  // CPU backend does (act_quant.h), so greedy outputs follow it token for
  // token. Off: exact float products (the float64 reference's numerics).
  bool llama_rounding = true;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int n_threads, CpuOptions opts = {});
  ~CpuBackend() override;

  std::string name() const override { return "CPU"; }
  bool host_visible_memory() const override { return true; }
  Queue& queue() override;
  void plan(Graph& g) override;
  const BackendStats& stats() const override { return stats_; }

  int n_threads() const { return pool_.size(); }
  size_t planned_bytes(const Graph& g) const override;

 private:
  friend class CpuQueue;
  void run_graph(Graph& g);

  CpuOptions opts_;
  cpu::ThreadPool pool_;
  std::unique_ptr<Queue> queue_;
  BackendStats stats_;
  struct Plan;
  std::unordered_map<const Graph*, std::unique_ptr<Plan>> plans_;
};

}  // namespace weir
