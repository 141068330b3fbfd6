#include "model/kv_cache.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>

#include "core/error.h"

namespace weir {
namespace {

// Bytes of a cell's row of n_head heads of head_dim elements: Q8_0 takes
// whole 32-element blocks a head (a head is read on its own).
size_t cache_row_bytes(DType type, int64_t head_dim, int64_t n_head) {
  if (type != DType::F32 && type != DType::F16 && type != DType::Q8_0)
    throw Error(std::string("kv cache: type must be f32, f16 or q8_0, not ") + dtype_name(type));
  if (type == DType::Q8_0 && head_dim % 32 != 0)
    throw Error("kv cache: q8_0 needs heads of a multiple of 32 dims; this model's are " + std::to_string(head_dim));
  return row_bytes(type, head_dim * n_head);
}

}  // namespace

double KVCache::bytes_for(const HParams& hp, DType type, int64_t n_cells, int64_t n_layers) {
  const size_t cell = cache_row_bytes(type, hp.head_dim_k, hp.n_head_kv) + cache_row_bytes(type, hp.head_dim_v, hp.n_head_kv);
  return double(cell) * double(n_cells) * double(n_layers);
}

KVCache::KVCache(const HParams& hp, int64_t n_cells, DType type, Backend& backend, int n_regions)
    : n_cells_(n_cells),
      type_(type),
      k_row_(cache_row_bytes(type, hp.head_dim_k, hp.n_head_kv)),
      v_row_(cache_row_bytes(type, hp.head_dim_v, hp.n_head_kv)),
      n_regions_(std::max(1, n_regions)) {
  region_ = n_cells / n_regions_;
  if (region_ < 1) n_regions_ = 1, region_ = n_cells;
  if (n_cells <= 0) throw Error("kv cache: context size must be positive");
  if (n_cells > std::numeric_limits<int32_t>::max())
    throw Error("kv cache: " + std::to_string(n_cells) + " cells is more than positions can number (2^31 - 1)");
  size_t per_layer = 0;
  if (__builtin_mul_overflow(k_row_ + v_row_, size_t(n_cells), &per_layer) ||
      __builtin_mul_overflow(per_layer, size_t(hp.n_layer), &bytes_))
    throw Error("kv cache: " + std::to_string(n_cells) + " cells would need more memory than can be addressed");
  // A buffer a layer, from the backend that runs that layer's attention
  // (Backend::alloc_state); zero-filled: unused cells hold no NaN.
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    try {
      mem_.push_back(backend.alloc_state(il, per_layer));
    } catch (const std::bad_alloc&) {
      throw Error("kv cache: cannot allocate " + std::to_string(bytes_) + " bytes for " + std::to_string(n_cells) +
                  " cells");
    } catch (const Error& e) {
      throw Error("kv cache: " + std::to_string(n_cells) + " cells need " + std::to_string(bytes_) + " bytes: " +
                  e.what());
    }
    char* p = static_cast<char*>(mem_.back()->data());
    k_.push_back(p);
    v_.push_back(p + k_row_ * size_t(n_cells));
  }
  pos_.assign(size_t(n_cells), -1);
  refs_.assign(size_t(n_cells), 0);
  owner_.assign(size_t(n_cells), -1);
  n_free_ = n_cells;
}

KVCache::~KVCache() = default;

std::vector<int32_t> KVCache::claim(const std::vector<int32_t>& pos, int32_t seq) {
  std::vector<int32_t> cells;
  cells.reserve(pos.size());
  auto take = [&](int64_t i) {
    if (refs_[size_t(i)] > 0) return;
    pos_[size_t(i)] = pos[cells.size()];
    refs_[size_t(i)] = 1;
    cells.push_back(int32_t(i));
  };
  std::vector<int32_t>& mine = cells_[seq];
  if (n_regions_ > 1 && seq >= 0 && seq < n_regions_) {
    // The region's free cells after this sequence's last one, then the rest.
    const int64_t r0 = int64_t(seq) * region_, r1 = seq + 1 == n_regions_ ? n_cells_ : r0 + region_;
    const int64_t after = mine.empty() || mine.back() < r0 || mine.back() >= r1 ? r0 : mine.back() + 1;
    for (int64_t i = after; i < r1 && cells.size() < pos.size(); ++i) take(i);
    for (int64_t i = r0; i < after && cells.size() < pos.size(); ++i) take(i);
  }
  if (n_regions_ == 1) {
    // Its reserved run, then free cells after its last one that nobody
    // reserved, then any such cell, then cells reserved by others.
    const auto run = runs_.find(seq);
    if (run != runs_.end()) {
      Run& r = run->second;
      for (int64_t i = r.next; i < r.end && cells.size() < pos.size(); ++i) take(i);
      r.next = cells.empty() ? r.end : std::max<int64_t>(r.next, cells.back() + 1);
    }
    const int64_t from = mine.empty() ? head_ : (mine.back() + 1) % n_cells_;
    for (int pass = 0; pass < 2 && cells.size() < pos.size(); ++pass)
      for (int64_t scanned = 0, i = pass == 0 ? from : head_; cells.size() < pos.size() && scanned < n_cells_; ++scanned) {
        if (pass == 1 || owner_[size_t(i)] < 0 || owner_[size_t(i)] == seq) take(i);
        i = (i + 1) % n_cells_;
      }
  } else {
    for (int64_t scanned = 0, i = head_; cells.size() < pos.size() && scanned < n_cells_; ++scanned) {
      take(i);
      i = (i + 1) % n_cells_;
    }
  }
  if (cells.size() < pos.size()) {  // full: undo
    for (int32_t c : cells) pos_[size_t(c)] = -1, refs_[size_t(c)] = 0;
    if (mine.empty()) cells_.erase(seq);
    return {};
  }
  if (n_regions_ == 1) head_ = (cells.back() + 1) % n_cells_;
  n_free_ -= int64_t(cells.size());
  mine.insert(mine.end(), cells.begin(), cells.end());
  return cells;
}

const std::vector<int32_t>& KVCache::cells_of(int32_t seq) const {
  static const std::vector<int32_t> none;
  const auto it = cells_.find(seq);
  return it == cells_.end() ? none : it->second;
}

void KVCache::clear() {
  std::fill(pos_.begin(), pos_.end(), -1);
  std::fill(refs_.begin(), refs_.end(), 0);
  std::fill(owner_.begin(), owner_.end(), -1);
  runs_.clear();
  n_free_ = n_cells_;
  cells_.clear();
  head_ = 0;
}

void KVCache::let_go(int32_t c) {
  if (--refs_[size_t(c)] > 0) return;
  pos_[size_t(c)] = -1;
  ++n_free_;
}

int64_t KVCache::reserve(int32_t seq, int64_t n) {
  unreserve(seq);
  if (n_regions_ != 1 || n <= 0) return 0;
  n = std::min(n, n_cells_);
  // The first run of n free, unreserved cells, else the longest.
  int64_t best = 0, best_len = 0;
  for (int64_t i = 0; i < n_cells_;) {
    if (refs_[size_t(i)] > 0 || owner_[size_t(i)] >= 0) {
      ++i;
      continue;
    }
    int64_t j = i;
    while (j < n_cells_ && j - i < n && refs_[size_t(j)] == 0 && owner_[size_t(j)] < 0) ++j;
    if (j - i > best_len) best = i, best_len = j - i;
    if (best_len == n) break;
    i = j;
  }
  if (best_len == 0) return 0;
  for (int64_t i = best; i < best + best_len; ++i) owner_[size_t(i)] = seq;
  runs_[seq] = {best, best + best_len, best};
  return best_len;
}

void KVCache::unreserve(int32_t seq) {
  const auto it = runs_.find(seq);
  if (it == runs_.end()) return;
  for (int64_t i = it->second.begin; i < it->second.end; ++i)
    if (owner_[size_t(i)] == seq) owner_[size_t(i)] = -1;
  runs_.erase(it);
}

void KVCache::remove_seq(int32_t seq) {
  unreserve(seq);
  const auto it = cells_.find(seq);
  if (it == cells_.end()) return;
  for (int32_t c : it->second) let_go(c);
  cells_.erase(it);
  head_ = 0;
}

void KVCache::share(int32_t from, int32_t to, int64_t n) {
  if (n <= 0) return;
  if (from == to) throw Error("kv cache: a sequence cannot share its own cells");
  const std::vector<int32_t>& src = cells_of(from);
  if (!cells_of(to).empty()) throw Error("kv cache: sequence " + std::to_string(to) + " already holds cells");
  if (int64_t(src.size()) < n)
    throw Error("kv cache: sequence " + std::to_string(from) + " holds " + std::to_string(src.size()) +
                " cells, not " + std::to_string(n));
  std::vector<int32_t>& dst = cells_[to];
  dst.assign(src.begin(), src.begin() + n);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t c = dst[size_t(i)];
    if (pos_[size_t(c)] != int32_t(i)) {
      cells_.erase(to);
      throw Error("kv cache: sequence " + std::to_string(from) + "'s cells do not hold positions 0 .. " +
                  std::to_string(n - 1) + " in order");
    }
  }
  for (int32_t c : dst) ++refs_[size_t(c)];
}

void KVCache::release_last(int32_t seq) {
  const auto it = cells_.find(seq);
  if (it == cells_.end() || it->second.empty()) return;
  const int32_t c = it->second.back();
  it->second.pop_back();
  let_go(c);
  if (it->second.empty()) cells_.erase(it);
  if (n_regions_ == 1 && refs_[size_t(c)] == 0) {
    head_ = c;  // the next claim takes it again
    const auto run = runs_.find(seq);
    if (run != runs_.end() && c >= run->second.begin && c < run->second.end)
      run->second.next = std::min<int64_t>(run->second.next, c);
  }
}

int64_t KVCache::extent() const {
  for (int64_t i = n_cells_; i > 0; --i)
    if (pos_[size_t(i - 1)] >= 0) return i;
  return 0;
}

}  // namespace weir
