// Offsets of a graph's tensors in one arena (a backend's activation memory),
// planned once per graph: first fit, adjacent free blocks merged. Shared by
// the backends' plan().
#pragma once
#include <cstddef>
#include <iterator>
#include <map>

namespace weir {

constexpr size_t kArenaAlign = 256;  // a GPU's widest loads and cuBLAS like 256-byte alignment
inline size_t arena_align_up(size_t n) { return (n + kArenaAlign - 1) & ~(kArenaAlign - 1); }

// Offsets in one arena, first fit, adjacent free blocks merged.
class ArenaPlanner {
 public:
  size_t alloc(size_t n) {
    n = arena_align_up(n);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second >= n) {
        const size_t off = it->first, size = it->second;
        free_.erase(it);
        if (size > n) free_[off + n] = size - n;
        return off;
      }
    }
    // Grow: extend a trailing free block if there is one.
    if (!free_.empty()) {
      auto last = std::prev(free_.end());
      if (last->first + last->second == top_) {
        const size_t off = last->first;
        free_.erase(last);
        top_ = off + n;
        return off;
      }
    }
    const size_t off = top_;
    top_ += n;
    return off;
  }
  void release(size_t off, size_t n) {
    n = arena_align_up(n);
    auto [it, ok] = free_.emplace(off, n);
    auto next = std::next(it);
    if (next != free_.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }
  size_t peak() const { return top_; }

 private:
  std::map<size_t, size_t> free_;
  size_t top_ = 0;
};

}  // namespace weir
