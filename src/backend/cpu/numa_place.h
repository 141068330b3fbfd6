// Putting a weight's rows on the NUMA nodes whose threads read them.
//
// Weights arrive as a read-only MAP_SHARED mapping of the GGUF file, i.e.
// page-cache pages. mbind(2) ignores a policy on MAP_SHARED file mappings for
// new pages (they follow the faulting thread's policy), MPOL_MF_MOVE skips
// pages another process maps, and the page cache may drop and re-read a page
// onto any node. So the backend copies each weight it places into anonymous
// memory (NodeBuffer): each node's page range is mbind()-ed to the node
// before any page exists, then the node's own threads write its rows (first
// touch agrees with the policy). The copy costs memory only on machines with
// more than one node, and only when --numa asks for it.
//
// Raw syscalls (mbind, move_pages): no libnuma needed at build or run time.
// Where the kernel refuses (no NUMA support, a seccomp filter), binding
// reports the errno and first touch still places pages.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend/cpu/numa_plan.h"

namespace weir::cpu {

size_t page_size();

// Sets the policy of the pages in [p, p + n) (p page-aligned) to node:
// MPOL_BIND when strict, else MPOL_PREFERRED (falls back to other nodes
// instead of failing when the node is full). move: migrate pages already
// there (MPOL_MF_MOVE). Returns 0 or an errno value.
int bind_pages(void* p, size_t n, int node, bool strict, bool move);

// Where the pages of [p, p + n) are (move_pages query).
struct PageCensus {
  std::map<int, size_t> on_node;  // node id -> pages
  size_t absent = 0;              // not yet faulted in
  size_t unknown = 0;             // the kernel would not say (error per page or call)
  size_t total() const;
  std::string describe() const;   // "node 0: 120 pages, node 1: 118 pages"
  PageCensus& operator+=(const PageCensus& o);
};
PageCensus page_census(const void* p, size_t n);

// The byte range of each group's pages in a weight of n_rows rows of
// row_bytes: group g's rows (NumaPlan::rows with align) widened to pages, a
// page shared by two groups belonging to the one that owns its first byte.
// Ranges are page-aligned, in order, and cover the weight's pages once.
struct ByteRange {
  size_t begin = 0, end = 0;
};
std::vector<ByteRange> group_pages(const NumaPlan& plan, int64_t n_rows, size_t row_bytes, int64_t align,
                                   size_t page);

// Anonymous, page-aligned memory whose page ranges are bound to nodes before
// first use. Move-only; unmapped on destruction.
class NodeBuffer {
 public:
  NodeBuffer() = default;
  // bytes rounded up to pages. Binding failures are counted, not thrown
  // (first touch by the right threads still places the pages).
  NodeBuffer(size_t bytes, const std::vector<ByteRange>& ranges, const std::vector<int>& nodes);
  ~NodeBuffer();
  NodeBuffer(NodeBuffer&& o) noexcept;
  NodeBuffer& operator=(NodeBuffer&& o) noexcept;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  int bind_errno() const { return bind_errno_; }  // last mbind error, 0 if none

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  int bind_errno_ = 0;
};

}  // namespace weir::cpu
