// The address ranges a backend holds (its buffers, arenas, weight copies),
// for Backend::owns(). Thread-safe: buffers may be freed on other threads.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace weir {

class MemoryRanges {
 public:
  void add(const void* p, size_t n) {
    std::lock_guard<std::mutex> lock(m_);
    ranges_[reinterpret_cast<uintptr_t>(p)] = n ? n : 1;
  }
  void erase(const void* p) {
    std::lock_guard<std::mutex> lock(m_);
    ranges_.erase(reinterpret_cast<uintptr_t>(p));
  }
  bool contains(const void* p) const {
    std::lock_guard<std::mutex> lock(m_);
    const auto a = reinterpret_cast<uintptr_t>(p);
    auto it = ranges_.upper_bound(a);
    if (it == ranges_.begin()) return false;
    --it;
    return a < it->first + it->second;
  }

 private:
  mutable std::mutex m_;
  std::map<uintptr_t, size_t> ranges_;  // base -> size
};

}  // namespace weir
