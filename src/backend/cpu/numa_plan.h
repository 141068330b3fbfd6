// Where the CPU backend's threads run and which weight rows each NUMA node
// owns. A plan is pure data computed from a topology, so it is tested on
// made-up machines; the backend applies it (pinning, numa_place.h).
//
//   off         nothing pinned, nothing placed: one group of all threads.
//   distribute  threads spread over the nodes the process may use, in
//               proportion to their usable CPUs, grouped by node; each thread
//               pinned to its node's CPUs; weight rows split between nodes in
//               proportion to their threads.
//   isolate     every thread on the node the process started on.
//
// Threads are pinned to their node's CPU set, not to one CPU each: memory
// locality is a node property, and a node-wide set lets the OS move a thread
// off a CPU something else is using.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cpu/numa_topology.h"

namespace weir::cpu {

enum class NumaMode { Off, Distribute, Isolate };
const char* numa_mode_name(NumaMode m);
// "off", "distribute", "isolate"; false for anything else.
bool parse_numa_mode(std::string_view s, NumaMode* out);

// Row boundaries between nodes are multiples of this (mul_mat splits rows in
// multiples of 16 or 32, so a node's rows never share a kernel tile).
inline constexpr int64_t kNumaRowAlign = 32;

struct NumaGroup {
  int node = 0;              // OS node id
  std::vector<int> cpus;     // CPUs its threads are pinned to (empty: not pinned)
  int first_thread = 0;      // its threads are [first_thread, first_thread + n_threads)
  int n_threads = 0;
};

struct NumaPlan {
  NumaMode mode = NumaMode::Off;
  std::vector<NumaGroup> groups;     // nodes that run threads, in thread order
  std::vector<int> group_of_thread;  // for ThreadPool: index into groups, per thread
  // Whether weights are placed per node: only where the machine has more
  // than one node (on one node every page is already local).
  bool place_weights = false;

  int n_threads() const { return int(group_of_thread.size()); }
  bool pins() const { return mode != NumaMode::Off; }
  // Rows [*begin, *end) of a matrix of n rows owned by group g: the share
  // of its threads, boundaries multiples of align. Over all groups the
  // ranges cover [0, n) once, in order; a range may be empty.
  void rows(int g, int64_t n, int64_t align, int64_t* begin, int64_t* end) const;
  // One line for logs: "distribute: node 0 (4 threads, CPUs 0-3), node 1 (...)".
  std::string describe() const;
};

// start_cpu: the CPU the process runs on (isolate picks its node); -1 asks
// sched_getcpu().
NumaPlan make_numa_plan(const NumaTopology& topo, NumaMode mode, int n_threads, int start_cpu = -1);

}  // namespace weir::cpu
