// The machine's NUMA nodes as the OS reports them: each node's CPUs and the
// distances between nodes, read from sysfs (/sys/devices/system/node, or
// another root for tests), and the CPUs this process may run on
// (sched_getaffinity). No libnuma: sysfs is all it needs.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace weir::cpu {

// Parses a kernel cpulist ("0-3,8-11", "5", "" or "\n" for none) into sorted,
// unique ids. Throws weir::Error on anything else.
std::vector<int> parse_cpulist(std::string_view s);
// The inverse, in the kernel's compact form ("0-3,8-11").
std::string format_cpulist(const std::vector<int>& cpus);

struct NumaNode {
  int id = 0;               // the OS's node id (nodeN)
  std::vector<int> cpus;    // all its CPUs
  std::vector<int> usable;  // those of them this process may run on
};

struct NumaTopology {
  std::vector<NumaNode> nodes;             // online nodes, by id
  std::vector<std::vector<int>> distance;  // [i][j] between nodes[i] and nodes[j]; 10 is local
  bool from_sysfs = false;                 // false: no sysfs tree, one node assumed

  // Index into nodes of the node that holds cpu, or -1.
  int node_of_cpu(int cpu) const;
  // Nodes with at least one usable CPU.
  int n_usable_nodes() const;

  // Reads the tree under root (e.g. "/sys/devices/system/node"); `allowed`
  // are the CPUs the process may use. A missing root gives one node 0 holding
  // `allowed` (kernels built without NUMA have no such tree). Malformed
  // files throw weir::Error naming the file.
  static NumaTopology read(const std::string& root, const std::vector<int>& allowed);
  // The running machine, for this process.
  static NumaTopology system();
};

// CPUs the calling thread may run on (sched_getaffinity).
std::vector<int> affinity_cpus();
// Restricts the calling thread to cpus; returns 0 or an errno value.
int set_affinity(const std::vector<int>& cpus);

}  // namespace weir::cpu
