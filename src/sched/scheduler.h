// A backend made of backends: one model across the CPU and GPUs.
//
// plan(g) assigns every node a backend (assign.h), cuts the graph into runs
// (split.h) and gives each run to its backend as a graph of its own, planned
// there once (a GPU run is recorded as a CUDA graph and replayed like any
// other). run(g) replays the runs with the copies and waits of the sync plan:
// queue copies and events only (backend.h's contract), the host waiting only
// where a CPU run reads a GPU result and at the step's end. To the Session it
// is one backend: its inputs are host memory (copied to the devices that
// read them), each layer's KV cache comes from the backend that runs that
// layer's attention (alloc_state), and the graph's outputs stay where they
// were computed (copy_to_host finds them).
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/memory_ranges.h"
#include "sched/assign.h"
#include "sched/split.h"

namespace weir::sched {

// Where a model's weights and state live, decided once at load
// (model/placement.h makes one from -ngl and -ot).
struct Placement {
  // The backend a weight leaf lives on when `node` reads it, or kHost.
  std::function<int(const Tensor& node, const Tensor& leaf)> weight_home;
  std::vector<int> layer_backend;  // each layer's KV cache and attention
  int output_backend = 0;          // where the logits are computed
  // The host's weights that op offload may stream: one span of memory (to
  // register with the offload backend) and the largest of them.
  const void* host_weights = nullptr;
  size_t host_weights_bytes = 0;
  size_t largest_host_weight = 0;
};

struct SchedOptions {
  int host_backend = 0;  // the backend that takes what nothing else decides (the CPU)
  // Op offload (assign.h rule 2): products with a host weight and at least
  // this many columns run on this backend (-1: off).
  int offload_backend = -1;
  int64_t offload_min_batch = 32;
  // Device buffers the streamed weights go through, in turn: a product
  // computes from one while the next ones are copied into the others.
  int stream_slots = 3;
  // Tests: the wait of each step's plan to leave out (its position among
  // the plan's waits, host and device; -1: none), to show that the chaos
  // backend catches a missing wait.
  int skip_wait = -1;
  // Time where the host spends it (profile()).
  bool profile = false;
};

// Where a step's time goes, seen from the host: host-visible runs are
// synchronous (their time is their work); a wait's time is what the host
// waited for devices' work and copies that did not overlap its own.
struct SchedProfile {
  uint64_t steps = 0, host_waits = 0;
  double host_run_s = 0;   // in host-visible runs (the CPU's layers)
  double wait_s = 0;       // in host waits, the step's end included
  double issue_s = 0;      // issuing device runs and copies
  std::string describe() const;  // per step
};

class Scheduler final : public Backend {
 public:
  // backends are not owned: they outlive the scheduler, unless handed over
  // with own().
  Scheduler(std::vector<Backend*> backends, Placement placement, SchedOptions options = {});
  void own(std::unique_ptr<Backend> b) { owned_.push_back(std::move(b)); }
  ~Scheduler() override;

  std::string name() const override;
  Device device() const override;  // the first device's, or the host backend's
  bool supports(const Tensor& node) const override;
  bool host_visible_memory() const override;  // where the logits are
  Queue& queue() override;
  Queue& copy_queue() override;
  bool owns(const void* p) const override;
  void plan(Graph& g) override;
  size_t planned_bytes(const Graph& g) const override;
  void release(const Graph& g) override;
  const BackendStats& stats() const override;
  // Host memory (pinned where a device copies from it): the Session's inputs.
  std::unique_ptr<Buffer> alloc(size_t bytes) override;
  std::unique_ptr<Buffer> alloc_host(size_t bytes) override;
  std::unique_ptr<Buffer> alloc_state(int64_t layer, size_t bytes) override;

  const std::vector<Backend*>& backends() const { return backends_; }
  // Op offload: whether the host weights are registered with the offload
  // backend (copies straight from them) or copied from pageable memory.
  bool streams_pinned() const { return pinned_; }
  // The last planned graph's split, for reports and tests.
  const SplitPlan* split_of(const Graph& g) const;
  const SchedProfile& profile() const { return profile_; }
  void reset_profile() { profile_ = {}; }

 private:
  friend class SchedQueue;
  struct Plan;
  void run_graph(Graph& g);
  // The backend whose memory holds p, or kHost.
  int owner(const void* p) const;
  AssignRules rules() const;

  std::vector<std::unique_ptr<Backend>> owned_;  // first: destroyed last
  std::vector<Backend*> backends_;
  Placement placement_;
  SchedOptions opts_;
  std::unique_ptr<Queue> queue_;
  MemoryRanges host_;  // alloc() buffers
  mutable BackendStats stats_;
  uint64_t own_host_waits_ = 0;
  SchedProfile profile_;
  std::vector<bool> dirty_;  // per backend: work queued since the last host wait on it
  // Op offload: the slots streamed weights go through, on the offload
  // backend; whether the host weights were registered there.
  std::vector<std::unique_ptr<Buffer>> slots_;
  bool pinned_ = false;
  std::unique_ptr<Event> last_stream_done_;  // the last streamed product of the last step
  std::unordered_map<const Graph*, std::unique_ptr<Plan>> plans_;
};

}  // namespace weir::sched
