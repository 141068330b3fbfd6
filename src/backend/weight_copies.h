// The copies of weights a backend makes for itself (device memory for a GPU,
// memory on the right NUMA nodes for the CPU), by the weight's host address
// and bytes (a tensor-parallel rank's rows of the tied embedding start where
// the whole embedding does):
// made once, shared by every planned graph that reads the weight, each plan
// holding the ones it uses. With drop_unused, a copy goes when the last plan
// holding it is released (the host memory may be reused for something
// else); without, it stays until the backend goes. A permanent copy (one a
// loader made ahead of planning) stays until the backend goes either way.
// The one weight-placement path of the CPU and CUDA backends.
#pragma once
#include <cstddef>
#include <algorithm>
#include <functional>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/graph.h"

namespace weir {

class WeightCopies {
 public:
  explicit WeightCopies(bool drop_unused) : drop_unused_(drop_unused) {}

  // The copy of the `bytes` of weight at host, or null.
  void* find(const void* host, size_t bytes) const {
    auto it = copies_.find(Key{host, bytes});
    return it == copies_.end() ? nullptr : it->second.data;
  }
  // Adds the copy of the `bytes` of weight at host: `keep` owns its memory
  // (its deleter frees it).
  void add(const void* host, size_t bytes, void* data, std::shared_ptr<void> keep, bool permanent = false) {
    const Key k{host, bytes};
    auto old = copies_.find(k);
    if (old != copies_.end()) {  // replaced (a weight loaded again)
      is_copy_.erase(old->second.data);
      bytes_ -= bytes;
    }
    copies_[k] = Copy{data, std::move(keep), old == copies_.end() ? 0 : old->second.users, permanent};
    is_copy_.insert(data);
    bytes_ += bytes;
  }
  // Whether p is a copy's start (a leaf already pointing at one).
  bool is_copy(const void* p) const { return is_copy_.count(p) != 0; }
  // Points every leaf of g whose data has a copy at it (a tied embedding is
  // read by the lookup and the output head: both leaves move), holding it
  // until release(g). packed: the copies are packed (a strided leaf, a
  // column block of a weight, was copied row after row): the leaf's strides
  // become contiguous.
  void point_leaves(Graph& g, bool packed = false) {
    for (Tensor& t : g.tensors()) {
      if (t.op != Op::Leaf || !t.data) continue;
      const Key k{t.data, t.n_bytes()};
      auto it = copies_.find(k);
      if (it == copies_.end()) continue;
      std::vector<Key>& mine = held_[&g];
      if (std::find(mine.begin(), mine.end(), k) == mine.end()) {
        mine.push_back(k);
        ++it->second.users;
      }
      t.data = it->second.data;
      if (packed) set_contiguous_strides(t);
    }
  }
  // Releases g's holds (dropping copies no plan holds, with drop_unused).
  void release(const Graph& g) {
    auto it = held_.find(&g);
    if (it == held_.end()) return;
    for (const Key& k : it->second) {
      auto c = copies_.find(k);
      if (c == copies_.end() || --c->second.users > 0 || !drop_unused_ || c->second.permanent) continue;
      bytes_ -= k.bytes;
      is_copy_.erase(c->second.data);
      copies_.erase(c);
    }
    held_.erase(it);
  }
  // Forgets the copies of weights whose host address is in [begin, begin + n)
  // (their model is closing: its addresses may be mapped again for another).
  // A copy a plan still holds stays alive, unreachable, until the backend goes.
  void forget(const void* begin, size_t n) {
    const auto* b = static_cast<const char*>(begin);
    for (auto it = copies_.begin(); it != copies_.end();) {
      const auto* h = static_cast<const char*>(it->first.host);
      if (h < b || h >= b + n) {
        ++it;
        continue;
      }
      if (it->second.users > 0) orphans_.push_back(it->second.keep);
      bytes_ -= it->first.bytes;
      is_copy_.erase(it->second.data);
      it = copies_.erase(it);
    }
  }
  size_t bytes() const { return bytes_; }
  size_t count() const { return copies_.size(); }

 private:
  struct Key {
    const void* host;
    size_t bytes;
    bool operator==(const Key& o) const { return host == o.host && bytes == o.bytes; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return std::hash<const void*>()(k.host) ^ (k.bytes * 0x9E3779B97F4A7C15ull); }
  };
  struct Copy {
    void* data;
    std::shared_ptr<void> keep;
    int users;
    bool permanent;
  };
  bool drop_unused_;
  std::unordered_map<Key, Copy, KeyHash> copies_;
  std::unordered_set<const void*> is_copy_;
  std::unordered_map<const Graph*, std::vector<Key>> held_;
  std::vector<std::shared_ptr<void>> orphans_;  // forgotten while held
  size_t bytes_ = 0;
};

}  // namespace weir
