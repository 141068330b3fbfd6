#include "backend/cpu/numa_place.h"

#include <linux/mempolicy.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace weir::cpu {
namespace {

constexpr int kMaskWords = 16;  // nodes 0..1022 (the kernel reads maxnode - 1 bits)

}  // namespace

size_t page_size() {
  static const size_t p = size_t(sysconf(_SC_PAGESIZE));
  return p;
}

int bind_pages(void* p, size_t n, int node, bool strict, bool move) {
  constexpr int bits = kMaskWords * 64;
  if (node < 0 || node >= bits - 1) return EINVAL;
  unsigned long mask[kMaskWords] = {};
  mask[node / 64] = 1UL << (node % 64);
  const long r = syscall(SYS_mbind, p, n, strict ? MPOL_BIND : MPOL_PREFERRED, mask, bits,
                         move ? MPOL_MF_MOVE : 0);
  return r == 0 ? 0 : errno;
}

size_t PageCensus::total() const {
  size_t t = absent + unknown;
  for (auto& [node, pages] : on_node) t += pages;
  return t;
}

std::string PageCensus::describe() const {
  std::string s;
  for (auto& [node, pages] : on_node)
    s += (s.empty() ? "" : ", ") + std::string("node ") + std::to_string(node) + ": " + std::to_string(pages) + " pages";
  if (absent) s += (s.empty() ? "" : ", ") + std::to_string(absent) + " pages not present";
  if (unknown) s += (s.empty() ? "" : ", ") + std::to_string(unknown) + " pages unknown";
  return s.empty() ? "no pages" : s;
}

PageCensus& PageCensus::operator+=(const PageCensus& o) {
  for (auto& [node, pages] : o.on_node) on_node[node] += pages;
  absent += o.absent;
  unknown += o.unknown;
  return *this;
}

PageCensus page_census(const void* p, size_t n) {
  PageCensus c;
  const size_t page = page_size();
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t last = reinterpret_cast<uintptr_t>(p) + n;
  constexpr size_t kBatch = 1024;
  std::vector<void*> pages;
  std::vector<int> status(kBatch);
  for (uintptr_t a = first; a < last;) {
    pages.clear();
    for (; a < last && pages.size() < kBatch; a += page) pages.push_back(reinterpret_cast<void*>(a));
    // nodes == NULL: only report where each page is.
    const long r = syscall(SYS_move_pages, 0, pages.size(), pages.data(), nullptr, status.data(), 0);
    if (r != 0) {
      c.unknown += pages.size();
      continue;
    }
    for (size_t i = 0; i < pages.size(); ++i) {
      if (status[i] >= 0) ++c.on_node[status[i]];
      else if (status[i] == -ENOENT) ++c.absent;
      else ++c.unknown;
    }
  }
  return c;
}

std::vector<ByteRange> group_pages(const NumaPlan& plan, int64_t n_rows, size_t row_bytes, int64_t align,
                                   size_t page) {
  const size_t bytes = size_t(n_rows) * row_bytes;
  const size_t end = (bytes + page - 1) / page * page;
  std::vector<ByteRange> r(plan.groups.size());
  auto up = [&](size_t b) { return std::min(end, (b + page - 1) / page * page); };
  for (size_t g = 0; g < r.size(); ++g) {
    int64_t b, e;
    plan.rows(int(g), n_rows, align, &b, &e);
    // The group owns the pages that start inside its bytes.
    r[g].begin = g == 0 ? 0 : up(size_t(b) * row_bytes);
    r[g].end = g + 1 == r.size() ? end : up(size_t(e) * row_bytes);
    if (r[g].end < r[g].begin) r[g].end = r[g].begin;
  }
  return r;
}

NodeBuffer::NodeBuffer(size_t bytes, const std::vector<ByteRange>& ranges, const std::vector<int>& nodes) {
  const size_t page = page_size();
  size_ = (bytes + page - 1) / page * page;
  if (size_ == 0) return;
  void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw Error("numa: cannot map " + std::to_string(size_) + " bytes for a weight copy: " + std::strerror(errno));
  data_ = p;
  for (size_t g = 0; g < ranges.size() && g < nodes.size(); ++g) {
    if (ranges[g].end <= ranges[g].begin) continue;
    if (int e = bind_pages(static_cast<char*>(data_) + ranges[g].begin, ranges[g].end - ranges[g].begin,
                           nodes[g], false, false))
      bind_errno_ = e;
  }
}

NodeBuffer::~NodeBuffer() {
  if (data_) munmap(data_, size_);
}

NodeBuffer::NodeBuffer(NodeBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), bind_errno_(o.bind_errno_) {}

NodeBuffer& NodeBuffer::operator=(NodeBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) munmap(data_, size_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    bind_errno_ = o.bind_errno_;
  }
  return *this;
}

}  // namespace weir::cpu
