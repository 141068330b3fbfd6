// The KV cache: per layer, K and V rows for n_cells cells, and for each cell
// the position of the token it holds and how many sequences hold it. Cells
// are one pool for all sequences, so one cache serves many; each sequence
// lists its cells in position order, and the attention mask, built from
// those lists each step, keeps sequences apart. A cell may belong to several
// sequences at once: a sequence that begins with the same tokens as another
// takes the other's first cells (share) instead of computing them again
// (the server's prefix cache); a cell is free when no sequence holds it.
//
// Attention reads a token's keys from its sequence's first cell to its last
// (on a GPU, per split of the keys), so a sequence's cells should lie close
// together. With one region, a sequence may reserve a run of free cells
// (reserve: a prompt and the answer it may grow to); its claims take cells
// from its run first, then free cells after its last one, then any free
// cell nobody reserved, and only then cells reserved by others.
// With n_regions > 1, sequence s < n_regions claims cells from region s
// (n_cells / n_regions cells) first, so each sequence's cells stay
// contiguous and in order while sequences decode side by side: attention
// then reads one span of keys per token, not the whole cache.
#pragma once
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "model/hparams.h"

namespace weir {

class KVCache {
 public:
  // K and V memory of each layer comes from the backend that runs that
  // layer's attention (Backend::alloc_state: device memory for a GPU); the
  // cell table stays on the host.
  KVCache(const HParams& hp, int64_t n_cells, DType type, Backend& backend, int n_regions = 1);
  ~KVCache();
  KVCache(const KVCache&) = delete;
  KVCache& operator=(const KVCache&) = delete;

  // The bytes a cache of n_cells cells and n_layers layers takes (K and V;
  // q8_0 rounds each head up to whole blocks): the one formula for the
  // cache's size, used to check that it fits before it is made. Throws Error
  // for a type the cache cannot hold.
  static double bytes_for(const HParams& hp, DType type, int64_t n_cells, int64_t n_layers);

  int64_t n_cells() const { return n_cells_; }
  DType dtype() const { return type_; }
  size_t bytes() const { return bytes_; }
  // K of layer il: [n_embd_k, n_cells]; V: [n_embd_v, n_cells], row per cell.
  void* k(int il) const { return k_[size_t(il)]; }
  void* v(int il) const { return v_[size_t(il)]; }
  size_t k_row_bytes() const { return k_row_; }
  size_t v_row_bytes() const { return v_row_; }

  // Claims cells for tokens at positions pos of sequence seq and records
  // them; returns the cell indices, or an empty vector when the cache is full.
  std::vector<int32_t> claim(const std::vector<int32_t>& pos, int32_t seq);
  void clear();
  void remove_seq(int32_t seq);
  // Reserves a run of n free cells for seq's next claims (one region only):
  // the first run of n free, unreserved cells, else the longest there is.
  // A reservation replaces seq's earlier one; remove_seq and unreserve end it.
  // Returns the run's length.
  int64_t reserve(int32_t seq, int64_t n);
  void unreserve(int32_t seq);
  // Lets sequence `to` (which holds no cells) hold the first n cells of
  // sequence `from` (positions 0 .. n - 1) as its own first n.
  void share(int32_t from, int32_t to, int64_t n);
  // Lets go of the cell sequence seq took last (a token taken back).
  void release_last(int32_t seq);
  int64_t n_free() const { return n_free_; }
  // One past the highest used cell: attention reads cells [0, extent()).
  int64_t extent() const;

  int32_t cell_pos(int64_t i) const { return pos_[size_t(i)]; }
  // How many sequences hold cell i (0: free).
  int32_t cell_refs(int64_t i) const { return refs_[size_t(i)]; }
  // The cells sequence seq holds, in the order claimed.
  const std::vector<int32_t>& cells_of(int32_t seq) const;

 private:
  int64_t n_cells_;
  DType type_;
  size_t k_row_, v_row_, bytes_ = 0;
  std::vector<std::unique_ptr<Buffer>> mem_;  // a layer each
  std::vector<void*> k_, v_;
  void let_go(int32_t cell);  // one holder fewer
  std::vector<int32_t> pos_, refs_;  // pos -1: free
  std::vector<int32_t> owner_;       // the sequence a cell is reserved for, or -1
  struct Run {
    int64_t begin = 0, end = 0, next = 0;  // next: no free cell of the run before it
  };
  std::unordered_map<int32_t, Run> runs_;  // reservations
  int64_t n_free_ = 0;
  int64_t head_ = 0;                // search start for free cells
  int n_regions_ = 1;
  int64_t region_ = 0;                                       // cells a region
  std::unordered_map<int32_t, std::vector<int32_t>> cells_;  // of each sequence
};

}  // namespace weir
