// Small helpers shared by the CPU kernels (ops_*.cpp only; not an interface).
#pragma once
#include <algorithm>
#include <climits>
#include <cstdint>
#include <exception>
#include <string>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

namespace weir::cpu {

// Errors found while checking a node's operands: every thread finds the same
// one, thread 0 throws weir::Error and the others return without writing.
// Call as `return fail(c, "...")` from a kernel.
inline void fail(const OpContext& c, const std::string& msg) {
  if (c.ith == 0) throw Error(msg);
}

// Flat row r (0 .. n_rows-1) of t, walking ne[1], then ne[2], then ne[3].
template <typename T = float>
inline T* flat_row(const Tensor& t, int64_t r) {
  const int64_t i1 = r % t.ne[1];
  const int64_t i2 = (r / t.ne[1]) % t.ne[2];
  const int64_t i3 = r / (t.ne[1] * t.ne[2]);
  return t.row_ptr<T>(i1, i2, i3);
}

// This thread's share [r0, r1) of n items.
inline void thread_range(int64_t n, const OpContext& c, int64_t* r0, int64_t* r1) {
  *r0 = n * c.ith / c.nth;
  *r1 = n * (c.ith + 1) / c.nth;
}

// Runs fn(begin, end) over the items [0, n_items) in chunks of `chunk` items:
// begin is a multiple of chunk, end = min(begin + chunk, n_items). Under the
// pool (c.chunks set) the chunks go to whichever thread asks next, so a
// thread that is slow or preempted takes fewer; without it thread ith runs
// the ith share of the chunks. Every thread of the job calls it, in the same
// order of loops as the others (kernels do: they branch only on shapes).
// There is no barrier at the end: a loop that reads what another wrote in
// the same node needs one in between (ThreadPool::sync).
template <class F>
inline void for_each_chunk(const OpContext& c, int64_t n_items, int64_t chunk, F&& fn) {
  if (n_items <= 0) return;
  chunk = std::max<int64_t>(chunk, 1);
  int64_t n_chunks = (n_items - 1) / chunk + 1;
  while (n_chunks > INT32_MAX) {  // the counter holds 32 bits; stay aligned
    chunk *= 2;
    n_chunks = (n_items - 1) / chunk + 1;
  }
  auto run = [&](int64_t k) { fn(k * chunk, std::min(n_items, (k + 1) * chunk)); };
  if (c.chunks && c.nth > 1) {
    ChunkCursor& cur = *c.chunks;
    const uint32_t tag = cur.next_tag++;
    cur.passed += uint32_t(n_chunks);
    // Every claimed chunk is counted done, even one that threw: threads
    // waiting for this loop's work (ThreadPool::sync) must not hang.
    uint32_t k, mine = 0;
    std::exception_ptr error;
    while (cur.counter->claim(tag, uint32_t(n_chunks), &k)) {
      ++mine;
      try {
        run(int64_t(k));
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
    if (mine) cur.counter->done(mine);
    if (error) std::rethrow_exception(error);
    return;
  }
  for (int64_t k = n_chunks * c.ith / c.nth, k1 = n_chunks * (c.ith + 1) / c.nth; k < k1; ++k) run(k);
}

// Runs fn() on thread 0 alone (a collective: one call a rank), counted as a
// loop of one chunk, so that ThreadPool::sync waits for it as for any other
// work: the other threads must not read its output before it is written.
// (Returning early on the other threads, as the collectives once did, let
// them pass the next barrier while thread 0 was still inside the call.)
template <class F>
inline void on_thread_zero(const OpContext& c, F&& fn) {
  if (c.chunks && c.nth > 1) {
    ChunkCursor& cur = *c.chunks;
    cur.next_tag++;  // every thread numbers this loop, as for_each_chunk does
    cur.passed += 1;
    if (c.ith != 0) return;
    std::exception_ptr error;
    try {
      fn();
    } catch (...) {
      error = std::current_exception();
    }
    cur.counter->done(1);
    if (error) std::rethrow_exception(error);
    return;
  }
  if (c.ith == 0) fn();
}

// A chunk size for for_each_chunk: about per_thread chunks per thread (more
// chunks balance better, fewer cost fewer claims), a multiple of align, and
// at least min_items.
inline int64_t chunk_size(const OpContext& c, int64_t n_items, int64_t align = 1, int per_thread = 4,
                          int64_t min_items = 1) {
  align = std::max<int64_t>(align, 1);
  const int64_t parts = int64_t(std::max(c.nth, 1)) * per_thread;
  int64_t chunk = std::max((n_items + parts - 1) / parts, min_items);
  return (chunk + align - 1) / align * align;
}

// for_each_chunk over rows of row_len elements each, in chunks of at least
// ~4K elements (a claim costs about as much as touching a few hundred).
template <class F>
inline void for_each_row_chunk(const OpContext& c, int64_t rows, int64_t row_len, F&& fn) {
  const int64_t min_rows = std::max<int64_t>(1, 4096 / std::max<int64_t>(row_len, 1));
  for_each_chunk(c, rows, chunk_size(c, rows, 1, 4, min_rows), fn);
}

inline std::string shape_str(const Tensor& t) {
  return t.name + "[" + std::to_string(t.ne[0]) + "," + std::to_string(t.ne[1]) + "," +
         std::to_string(t.ne[2]) + "," + std::to_string(t.ne[3]) + "]";
}

}  // namespace weir::cpu
