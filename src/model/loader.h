// Weights to the memory that will read them, before the first graph is
// planned, with the disk (or page cache) and the copy engines busy at once.
//
// For every weight (or byte range of one) whose home is a device, reader
// threads pread the file into pinned staging buffers (Backend::alloc_host),
// a ring per backend; each filled buffer is handed to copies on the
// backend's copy queue and an event, and is reused once that event is done.
// When every copy is done, each backend adopts its weights
// (Backend::adopt_weight): plan() then points graphs at them and copies
// nothing. Weights whose home is the CPU stay in the file mapping (zero
// copy), or with --no-mmap are read into private memory at the same
// addresses (load_into_memory).
//
// Items name byte ranges, so a tensor split by rows across devices (tensor
// parallelism) is several items, each device reading only its own rows.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/gguf.h"

namespace weir {

struct LoadItem {
  size_t tensor = 0;  // index in the file's tensor table
  Backend* backend = nullptr;
  uint64_t begin = 0, end = 0;  // bytes of the tensor; end 0: to its end
  // Or a strided part (a column block of a weight, tensor parallelism's
  // share of a product whose input is split): `rows` rows of row_bytes,
  // row i at begin + i * row_stride, packed on the device (end unused).
  uint64_t rows = 0, row_bytes = 0, row_stride = 0;
};

struct LoadProgress {
  uint64_t done = 0, total = 0;  // bytes read
  double seconds = 0;
};

struct LoaderOptions {
  int readers = 4;                     // threads reading the file
  size_t buffer_bytes = size_t(16) << 20;  // each staging buffer
  int buffers = 6;                     // staging buffers a backend (at least readers + 1 are made)
  bool direct_io = false;              // O_DIRECT reads (falls back, saying why, where refused)
  const std::atomic<bool>* stop = nullptr;  // set (Ctrl-C): the load throws Cancelled
  // Called on the loading thread about ten times a second while reading.
  std::function<void(const LoadProgress&)> progress;
  // Tests: the read that covers this file offset fails as with EIO (-1: none).
  int64_t fail_read_at = -1;
};

struct LoadReport {
  uint64_t bytes = 0;          // of weights loaded (device and --no-mmap)
  uint64_t device_bytes = 0;   // of them, copied to devices
  size_t items = 0;
  double seconds = 0;          // until every byte is where it will be used
  double start_seconds = 0;    // of them, starting the backends (a GPU's context) first
  double weights_seconds = 0;  // of them, reading and copying the weights
  double alloc_seconds = 0;    // of those, allocating device and staging memory
  double read_seconds = 0;     // readers' time in pread, over the number of readers
  double wait_seconds = 0;     // readers' time waiting for a staging buffer (copies behind), likewise
  double copy_tail_seconds = 0;  // from the last read to the last copy's end
  int readers = 0;
  bool direct_io = false;      // reads went around the page cache
  std::string direct_io_note;  // why they did not, when asked for
  // Adds a later load's bytes and times (the GPUs' weights after the
  // --no-mmap reads); seconds and start_seconds stay the caller's.
  void add(const LoadReport& r);
  // "4.91 GB in 0.41 s: starting the backends 0.20 s, weights 0.21 s (23.4
  // GB/s; reading 0.15 s, waiting for copies 0.00 s, copy tail 0.001 s; 16
  // readers)"
  std::string summary() const;
};

// What a load made: the weights its backends adopted. Destroying it makes
// them forget those weights (the model is closing; its addresses may be
// mapped again for another model). Destroy it before its backends.
class LoadedWeights {
 public:
  LoadedWeights() = default;
  LoadedWeights(LoadedWeights&&) noexcept;
  LoadedWeights& operator=(LoadedWeights&&) noexcept;
  ~LoadedWeights();
  const LoadReport& report() const { return report_; }
  // Where item i's bytes went (its backend's memory), in the items' order.
  const std::vector<void*>& device_data() const { return data_; }

 private:
  friend LoadedWeights load_weights(const GGUFFile&, std::span<const LoadItem>, const LoaderOptions&);
  void forget();
  LoadReport report_;
  std::vector<Backend*> backends_;
  std::vector<void*> data_;
  const void* base_ = nullptr;  // the file mapping
  size_t size_ = 0;
};

// Loads the items into their backends. Throws Error naming the tensor and
// file offset when the file is short or a read fails, Cancelled when stop is
// set; then nothing is adopted and every buffer is freed (the copies are
// waited for first).
LoadedWeights load_weights(const GGUFFile& file, std::span<const LoadItem> items, const LoaderOptions& o = {});

// --no-mmap: turns the file's mapping into private memory
// (MappedFile::to_private_memory) and reads into it the header and every
// tensor not in `skip` (the ones loaded to devices, whose host bytes no one
// reads), with the same reader threads. Adds to `report` when given.
void load_into_memory(const GGUFFile& file, const std::vector<bool>& skip, const LoaderOptions& o,
                      LoadReport* report = nullptr);

}  // namespace weir
