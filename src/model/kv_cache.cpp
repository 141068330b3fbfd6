#include "model/kv_cache.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"

namespace weir {

KVCache::KVCache(const HParams& hp, int64_t n_cells, DType type, Backend& backend)
    : n_cells_(n_cells), type_(type), k_row_(row_bytes(type, hp.n_embd_k())),
      v_row_(row_bytes(type, hp.n_embd_v())) {
  if (type != DType::F32 && type != DType::F16) throw Error("kv cache: type must be f32 or f16");
  if (n_cells <= 0) throw Error("kv cache: context size must be positive");
  const size_t per_layer = (k_row_ + v_row_) * size_t(n_cells);
  bytes_ = per_layer * size_t(hp.n_layer);
  mem_ = backend.alloc(bytes_);  // zero-filled: unused cells hold no NaN
  char* p = static_cast<char*>(mem_->data());
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    k_.push_back(p);
    p += k_row_ * size_t(n_cells);
    v_.push_back(p);
    p += v_row_ * size_t(n_cells);
  }
  pos_.assign(size_t(n_cells), -1);
  seq_.assign(size_t(n_cells), -1);
}

KVCache::~KVCache() = default;

std::vector<int32_t> KVCache::claim(const std::vector<int32_t>& pos, int32_t seq) {
  std::vector<int32_t> cells;
  cells.reserve(pos.size());
  int64_t i = head_;
  for (int64_t scanned = 0; cells.size() < pos.size() && scanned < n_cells_; ++scanned) {
    if (pos_[size_t(i)] < 0) cells.push_back(int32_t(i));
    i = (i + 1) % n_cells_;
  }
  if (cells.size() < pos.size()) return {};
  for (size_t t = 0; t < pos.size(); ++t) {
    pos_[size_t(cells[t])] = pos[t];
    seq_[size_t(cells[t])] = seq;
  }
  head_ = (cells.back() + 1) % n_cells_;
  return cells;
}

void KVCache::clear() {
  std::fill(pos_.begin(), pos_.end(), -1);
  std::fill(seq_.begin(), seq_.end(), -1);
  head_ = 0;
}

void KVCache::remove_seq(int32_t seq) {
  for (size_t i = 0; i < pos_.size(); ++i)
    if (seq_[i] == seq) pos_[i] = seq_[i] = -1;
  head_ = 0;
}

int64_t KVCache::extent() const {
  for (int64_t i = n_cells_; i > 0; --i)
    if (pos_[size_t(i - 1)] >= 0) return i;
  return 0;
}

}  // namespace weir
