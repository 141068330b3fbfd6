// The CPU backend: runs graphs on a persistent thread pool with buffers
// planned once per graph (intermediate tensors share memory when their
// lifetimes do not overlap).
#pragma once
#include <atomic>
#include <map>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "backend/backend.h"
#include "backend/memory_ranges.h"
#include "backend/weight_copies.h"
#include "backend/cpu/numa_place.h"
#include "backend/cpu/numa_plan.h"
#include "backend/cpu/thread_pool.h"

namespace weir {

namespace cpu {
struct RepackedWeight;
class CpuProfile;
}

struct CpuOptions {
  // Round activations before quantized matrix products the way llama.cpp's
  // CPU backend does (act_quant.h), so greedy outputs follow it token for
  // token. Off: exact float products (the float64 reference's numerics).
  bool llama_rounding = true;
  // Threads pinned per NUMA node and weight rows copied onto the node whose
  // threads compute them (numa_plan.h). Off pins and moves nothing.
  cpu::NumaMode numa = cpu::NumaMode::Off;
  // Where the node tree is read from; tests point it at a made-up machine.
  std::string numa_sysfs_root = "/sys/devices/system/node";
  // When set: a graph's run is cut into jobs of about segment_macs
  // multiply-adds, and a run whose flag is true between them stops with
  // Cancelled (a long prompt on a big model stops in well under a second;
  // a decode step of a small model stays one job).
  const std::atomic<bool>* stop = nullptr;
  double segment_macs = double(1 << 30);
  // Barriers spin without sleeping (for comparisons; WEIR_BARRIER=spin).
  bool spin_barriers = false;
  // A barrier before every stage, not only where the plan needs one (for
  // comparisons; WEIR_ALL_BARRIERS=1).
  bool all_barriers = false;
  // Weights the CPU's products read rewritten, when first planned, into the
  // backend's own interleaved layouts (repack.h: Q4_0, Q8_0, Q4_K, Q6_K), for kernels that
  // read 8 rows at once; with llama_rounding only (they take quantized
  // activations). Off: the file's layout (for comparisons; WEIR_CPU_REPACK=0).
  // Not with NUMA placement (its node copies stay in the file's layout).
  bool repack = true;
  // After repacking a weight, drop its pages in the file's layout from this
  // process where they are a read-only file mapping and nothing here reads
  // them again (file_pages.h; not with AMX, whose prefill reads that
  // layout). The runtime turns it off where a GPU backend reads the same
  // host weights (op offload streams them).
  bool release_file_pages = true;
  // Prefill products (32 tokens or more) on AMX-BF16 tiles where the CPU has
  // them (amx_product.h), with llama_rounding only (bf16 rounds x: not the
  // exact mode's numerics); off: the vector kernels (WEIR_CPU_AMX=0).
  bool amx = true;
  // Time every node, summed per kind, printed when the backend goes
  // (cpu_profile.h; WEIR_CPU_PROFILE=1). Adds a barrier around every node.
  bool profile = false;
};

// What NUMA placement did, for logs and tests.
struct NumaReport {
  int pin_errno = 0;                     // last sched_setaffinity failure, 0 if none
  int bind_errno = 0;                    // last mbind failure, 0 if none
  size_t weights = 0, bytes = 0;         // weights copied into node memory
  std::map<int, size_t> planned_pages;   // node id -> pages meant for it
  cpu::PageCensus census;                // where those pages are (move_pages)
  std::string describe() const;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int n_threads, CpuOptions opts = {});
  ~CpuBackend() override;

  std::string name() const override { return "CPU"; }
  Device device() const override { return {}; }
  bool supports(const Tensor& node) const override;
  bool host_visible_memory() const override { return true; }
  Queue& queue() override;
  Queue& copy_queue() override;  // the same inline queue
  bool owns(const void* p) const override;
  void plan(Graph& g) override;
  const BackendStats& stats() const override { return stats_; }
  std::unique_ptr<Buffer> alloc(size_t bytes) override;
  std::unique_ptr<Buffer> alloc_host(size_t bytes) override;

  int n_threads() const { return pool_.size(); }
  // Each thread's node group (numa().group_of_thread) for a hierarchical
  // barrier, and each group's share of a weight's rows (NumaPlan::rows with
  // cpu::kNumaRowAlign), which is where placed weights' pages live.
  const cpu::NumaPlan& numa() const { return numa_; }
  const NumaReport& numa_report() const { return numa_report_; }
  size_t planned_bytes(const Graph& g) const override;
  void release(const Graph& g) override;

 private:
  friend class CpuQueue;
  void run_graph(Graph& g);
  struct Plan;
  void plan_node_barriers(Plan& p) const;
  void plan_segments(Plan& p) const;
  void pin_threads();
  // Points g's weights (leaves read by mul_mat) at copies placed per node.
  void place_weights(Graph& g);

  CpuOptions opts_;
  cpu::NumaPlan numa_;  // before pool_, which may be built from it
  cpu::ThreadPool pool_;
  NumaReport numa_report_;
  std::vector<int> caller_affinity_;  // restored on destruction when pinned
  // Weights copied into node memory (NUMA), kept for the backend's life.
  WeightCopies weights_{false};
  // Weights rewritten into the backend's layouts (repack.h), by the leaf's
  // (data, rows, stride), kept for the backend's life.
  struct RepackKey {
    const void* data;
    int64_t rows;
    size_t stride;
    bool operator<(const RepackKey& o) const {
      return data != o.data ? data < o.data : rows != o.rows ? rows < o.rows : stride < o.stride;
    }
  };
  std::map<RepackKey, std::unique_ptr<cpu::RepackedWeight>> repacked_;
  const cpu::RepackedWeight* repacked_for(const Tensor& w);
  bool amx_on() const;  // CpuOptions::amx, llama_rounding and the CPU has AMX-BF16
  std::unique_ptr<cpu::CpuProfile> profile_;  // with CpuOptions::profile
  std::unique_ptr<Queue> queue_;
  BackendStats stats_;
  MemoryRanges owned_;  // alloc() buffers and plan arenas
  std::unordered_map<const Graph*, std::unique_ptr<Plan>> plans_;
};

}  // namespace weir
