#include "model/loader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/thread_group.h"

namespace weir {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr uint64_t kDirectAlign = 4096;      // O_DIRECT offsets, lengths and addresses
constexpr uint64_t kMergeGap = 4096;  // ranges this close (alignment padding) share a read

// Bytes of the file to one place: a device address (through a staging
// buffer) or, for host reads, the mapping itself.
struct Piece {
  uint64_t file_off = 0, len = 0;  // len: the bytes the file holds from file_off (extent)
  void* dst = nullptr;  // device address (device targets); unused for the host
  size_t tensor = 0;    // for messages
  // A strided piece: `rows` rows of row_bytes, `stride` apart in the file,
  // packed at dst (0 rows: len contiguous bytes).
  uint64_t rows = 0, row_bytes = 0, stride = 0;
  uint64_t delivered() const { return rows ? rows * row_bytes : len; }
};

// One pread: the file's bytes [a0, a1) (aligned for O_DIRECT) into one
// staging buffer of a target, then its pieces' copies.
struct Read {
  int target = 0;
  uint64_t a0 = 0, a1 = 0;
  std::vector<Piece> pieces;
};

// Where reads go: a backend's ring of staging buffers, or (backend null)
// the file's own private memory.
struct Target {
  Backend* backend = nullptr;
  std::vector<std::unique_ptr<Buffer>> staging;
  std::vector<std::unique_ptr<Event>> pending;  // each buffer's last copies
  std::deque<int> in_copy;                      // buffers handed to copies, oldest first
  std::vector<int> free;
  std::mutex m;
  std::condition_variable cv;
  std::mutex queue_m;  // one thread issues copies at a time

  // A staging buffer to read into: a free one, or the one whose copies were
  // issued first, once they are done.
  int acquire(double* waited) {
    std::unique_lock<std::mutex> lk(m);
    for (;;) {
      if (!free.empty()) {
        const int s = free.back();
        free.pop_back();
        return s;
      }
      if (!in_copy.empty()) {
        const int s = in_copy.front();
        in_copy.pop_front();
        std::unique_ptr<Event> ev = std::move(pending[size_t(s)]);
        lk.unlock();
        const auto t0 = Clock::now();
        ev->wait();
        *waited += seconds_since(t0);
        return s;
      }
      cv.wait(lk);
    }
  }
  void release(int s, std::unique_ptr<Event> ev) {
    {
      std::lock_guard<std::mutex> lk(m);
      if (ev) {
        pending[size_t(s)] = std::move(ev);
        in_copy.push_back(s);
      } else {
        free.push_back(s);
      }
    }
    cv.notify_one();
  }
};

// A byte range of the file for one target, before it is cut into reads.
struct Span {
  int target = 0;
  uint64_t file_off = 0, len = 0;
  void* dst = nullptr;
  size_t tensor = 0;
  uint64_t rows = 0, row_bytes = 0, stride = 0;  // strided (LoadItem's)
};

// Cuts spans (sorted by file offset within each target) into reads of at
// most cap bytes (a multiple of align), merging neighbours closer than
// kMergeGap; a span longer than a read is split across several.
std::vector<Read> plan_reads(std::vector<Span> spans, uint64_t cap, uint64_t align) {
  std::stable_sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.target != b.target ? a.target < b.target : a.file_off < b.file_off;
  });
  std::vector<Read> reads;
  Read cur;
  bool open = false;
  auto close = [&] {
    if (open) reads.push_back(std::move(cur));
    cur = Read{};
    open = false;
  };
  for (const Span& s : spans) {
    if (s.rows) {  // strided: whole rows a read, alone
      close();
      const uint64_t per = std::max<uint64_t>(1, (cap - 2 * align - s.row_bytes) / s.stride + 1);
      for (uint64_t i0 = 0; i0 < s.rows; i0 += per) {
        const uint64_t k = std::min(per, s.rows - i0), off = s.file_off + i0 * s.stride;
        Piece p{off, (k - 1) * s.stride + s.row_bytes, static_cast<char*>(s.dst) + i0 * s.row_bytes, s.tensor,
                k, s.row_bytes, s.stride};
        Read r;
        r.target = s.target;
        r.a0 = off / align * align;
        r.a1 = (off + p.len + align - 1) / align * align;
        r.pieces.push_back(p);
        reads.push_back(std::move(r));
      }
      continue;
    }
    uint64_t off = s.file_off, left = s.len;
    char* dst = static_cast<char*>(s.dst);
    while (left > 0) {
      // A new read for another target, past a gap, past the read's end, or
      // before its start (spans that overlap: a tensor whole and a range of it).
      if (open && (cur.target != s.target || off > cur.pieces.back().file_off + cur.pieces.back().len + kMergeGap ||
                   off >= cur.a0 + cap || off < cur.a0))
        close();
      if (!open) {
        cur.target = s.target;
        cur.a0 = off / align * align;
        open = true;
      }
      const uint64_t end = std::min(off + left, cur.a0 + cap);
      cur.pieces.push_back(Piece{off, end - off, dst, s.tensor});
      cur.a1 = std::max(cur.a1, (end + align - 1) / align * align);
      if (dst) dst += end - off;
      left -= end - off;
      off = end;
    }
  }
  close();
  // Readers take reads in file order, whichever target they are for.
  std::stable_sort(reads.begin(), reads.end(), [](const Read& a, const Read& b) { return a.a0 < b.a0; });
  return reads;
}

// The file, opened for reading: with O_DIRECT where asked and allowed.
class ReadFile {
 public:
  ReadFile(const std::string& path, bool direct, uint64_t size) : path_(path), size_(size) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
    if (direct) {
      direct_fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
      if (direct_fd_ < 0) note_ = std::string("O_DIRECT refused by this filesystem (") + std::strerror(errno) + ")";
    }
  }
  ~ReadFile() {
    if (fd_ >= 0) ::close(fd_);
    if (direct_fd_ >= 0) ::close(direct_fd_);
  }
  bool direct() const { return direct_fd_ >= 0 && !direct_failed_.load(); }
  std::string note() const {
    std::lock_guard<std::mutex> lk(m_);
    return note_;
  }

  // Reads [a0, a1) into dst; fewer bytes only at the end of the file.
  // Throws with errno's message (the caller names the tensor).
  uint64_t read(uint8_t* dst, uint64_t a0, uint64_t a1) {
    uint64_t got = 0;
    while (a0 + got < a1) {
      const bool d = direct();
      const ssize_t r = ::pread(d ? direct_fd_ : fd_, dst + got, size_t(a1 - a0 - got), off_t(a0 + got));
      if (r < 0) {
        if (errno == EINTR) continue;
        if (d && errno == EINVAL) {  // the filesystem takes O_DIRECT at open but not at read
          fall_back(std::string("O_DIRECT reads refused by this filesystem (") + std::strerror(errno) + ")");
          continue;
        }
        throw std::system_error(errno, std::generic_category());
      }
      if (r == 0) break;
      got += uint64_t(r);
      if (d && got % kDirectAlign != 0 && a0 + got < std::min(a1, size_)) {
        // A short direct read not at the end: the rest would be unaligned.
        fall_back("O_DIRECT gave a short read");
      }
    }
    return got;
  }

 private:
  void fall_back(const std::string& why) {
    std::lock_guard<std::mutex> lk(m_);
    if (!direct_failed_.exchange(true)) note_ = why;
  }
  std::string path_;
  uint64_t size_;  // the file's, as mapped: a short read there is its end
  int fd_ = -1, direct_fd_ = -1;
  std::atomic<bool> direct_failed_{false};
  mutable std::mutex m_;
  std::string note_;
};

// Runs reads on o.readers threads into targets; host reads go to
// host_base + a0. Waits for every copy before returning or throwing.
void run_reads(const GGUFFile& file, std::vector<Read>& reads, std::vector<Target>& targets, uint8_t* host_base,
               const LoaderOptions& o, LoadReport& rep) {
  if (reads.empty()) return;
  const std::string& path = file.name();
  ReadFile f(path, o.direct_io, file.size());
  const auto& tensors = file.tensors();
  auto tensor_at = [&](const Read& r, uint64_t off) -> std::string {
    for (const Piece& p : r.pieces)
      if (off >= p.file_off && off < p.file_off + p.len) return "tensor '" + std::string(tensors[p.tensor].name) + "'";
    return r.pieces.empty() ? std::string("the header") : "tensor '" + std::string(tensors[r.pieces.front().tensor].name) + "'";
  };
  auto piece_name = [&](const Piece& p) -> std::string {
    return p.tensor == SIZE_MAX ? std::string("the header") : "tensor '" + std::string(tensors[p.tensor].name) + "'";
  };

  const int n = std::max(1, std::min<int>(o.readers, int(reads.size())));
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> done{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_m;
  std::vector<double> read_s(size_t(n), 0.0), wait_s(size_t(n), 0.0);
  std::atomic<int64_t> last_read_end_ns{0};
  std::atomic<int> running{n};
  std::mutex done_m;
  std::condition_variable done_cv;
  const auto t0 = Clock::now();
  auto fail = [&](std::exception_ptr e) {
    std::lock_guard<std::mutex> lk(error_m);
    if (!error) error = e;
    failed = true;
  };
  auto body = [&](int ith) {
    while (!failed.load()) {
      if (o.stop && o.stop->load()) {
        fail(std::make_exception_ptr(Cancelled("interrupted while loading the weights")));
        break;
      }
      const size_t i = next.fetch_add(1);
      if (i >= reads.size()) break;
      Read& r = reads[i];
      Target& t = targets[size_t(r.target)];
      int slot = -1;
      try {
        uint8_t* dst = host_base + r.a0;
        if (t.backend) {
          slot = t.acquire(&wait_s[size_t(ith)]);
          dst = static_cast<uint8_t*>(t.staging[size_t(slot)]->data());
        }
        if (o.fail_read_at >= 0 && uint64_t(o.fail_read_at) >= r.a0 && uint64_t(o.fail_read_at) < r.a1)
          throw Error(path + ": cannot read " + tensor_at(r, uint64_t(o.fail_read_at)) + " at offset " +
                      std::to_string(r.a0) + ": " + std::strerror(EIO));
        const auto r0 = Clock::now();
        uint64_t got = 0;
        try {
          got = f.read(dst, r.a0, r.a1);
        } catch (const std::system_error& e) {
          throw Error(path + ": cannot read " + tensor_at(r, r.a0) + " at offset " + std::to_string(r.a0) + ": " +
                      e.code().message());
        }
        read_s[size_t(ith)] += seconds_since(r0);
        const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
        int64_t seen = last_read_end_ns.load();
        while (seen < now_ns && !last_read_end_ns.compare_exchange_weak(seen, now_ns)) {
        }
        for (const Piece& p : r.pieces)
          if (p.file_off + p.len > r.a0 + got)
            throw Error(path + ": the file ends at byte " + std::to_string(r.a0 + got) + ", inside " + piece_name(p) +
                        " (bytes " + std::to_string(p.file_off) + ".." + std::to_string(p.file_off + p.len) +
                        "); was it truncated?");
        uint64_t bytes = 0;
        for (const Piece& p : r.pieces) bytes += p.delivered();
        if (t.backend) {
          std::unique_ptr<Event> ev;
          {
            std::lock_guard<std::mutex> lk(t.queue_m);
            Queue& q = t.backend->copy_queue();
            for (const Piece& p : r.pieces) {
              if (p.rows)
                q.copy_to_device_2d(p.dst, p.row_bytes, dst + (p.file_off - r.a0), p.stride, p.row_bytes, p.rows);
              else
                q.copy_to_device(p.dst, dst + (p.file_off - r.a0), p.len);
            }
            ev = q.record();
          }
          t.release(slot, std::move(ev));
          slot = -1;
        }
        done += bytes;
      } catch (...) {
        if (slot >= 0) t.release(slot, nullptr);
        fail(std::current_exception());
      }
    }
    {
      std::lock_guard<std::mutex> lk(done_m);
      --running;
    }
    done_cv.notify_all();
  };
  uint64_t total = 0;
  for (const Read& r : reads)
    for (const Piece& p : r.pieces) total += p.delivered();
  try {
    ThreadGroup g;
    g.start(n, 0, body, [&] { failed = true; });
    // Progress from this thread while the readers work.
    std::unique_lock<std::mutex> lk(done_m);
    while (running > 0) {
      done_cv.wait_for(lk, std::chrono::milliseconds(100));
      if (o.progress && running > 0) o.progress(LoadProgress{done.load(), total, seconds_since(t0)});
    }
    lk.unlock();
    g.join();
  } catch (...) {  // threads that could not start (the others are joined)
    fail(std::current_exception());
  }
  // Every copy done before the staging buffers (or the weights, on failure) go.
  std::exception_ptr sync_error;
  for (Target& t : targets)
    if (t.backend) try {
        t.backend->copy_queue().synchronize();
      } catch (...) {
        if (!sync_error) sync_error = std::current_exception();
      }
  if (error) std::rethrow_exception(error);
  if (sync_error) std::rethrow_exception(sync_error);
  if (o.progress) o.progress(LoadProgress{total, total, seconds_since(t0)});
  const double wall = seconds_since(t0);
  double rs = 0, ws = 0;
  for (int i = 0; i < n; ++i) rs += read_s[size_t(i)], ws += wait_s[size_t(i)];
  rep.read_seconds += rs / n;
  rep.wait_seconds += ws / n;
  rep.copy_tail_seconds += std::max(0.0, wall - double(last_read_end_ns.load()) * 1e-9);
  rep.readers = std::max(rep.readers, n);
  rep.direct_io = f.direct();
  if (o.direct_io && !f.direct()) rep.direct_io_note = f.note();
}

uint64_t read_cap(const LoaderOptions& o) {
  const uint64_t align = o.direct_io ? kDirectAlign : 1;
  uint64_t cap = std::max<uint64_t>(o.buffer_bytes / align * align, 2 * align);
  return cap;
}

}  // namespace

void LoadReport::add(const LoadReport& r) {
  bytes += r.bytes;
  device_bytes += r.device_bytes;
  items += r.items;
  weights_seconds += r.weights_seconds;
  alloc_seconds += r.alloc_seconds;
  read_seconds += r.read_seconds;
  wait_seconds += r.wait_seconds;
  copy_tail_seconds += r.copy_tail_seconds;
  readers = std::max(readers, r.readers);
  direct_io = r.direct_io;
  if (!r.direct_io_note.empty()) direct_io_note = r.direct_io_note;
}

std::string LoadReport::summary() const {
  char buf[384];
  const double w = weights_seconds > 0 ? weights_seconds : seconds;
  std::snprintf(buf, sizeof buf,
                "%.2f GB in %.2f s: starting the backends %.2f s, weights %.2f s (%.1f GB/s; allocating %.3f s, reading "
                "%.2f s, waiting for copies %.2f s, copy tail %.3f s; %d reader%s%s)",
                double(bytes) / 1e9, seconds, start_seconds, w, w > 0 ? double(bytes) / w / 1e9 : 0.0, alloc_seconds,
                read_seconds,
                wait_seconds, copy_tail_seconds, readers, readers == 1 ? "" : "s", direct_io ? ", O_DIRECT" : "");
  return buf;
}

LoadedWeights::LoadedWeights(LoadedWeights&& o) noexcept { *this = std::move(o); }
LoadedWeights& LoadedWeights::operator=(LoadedWeights&& o) noexcept {
  if (this != &o) {
    forget();
    report_ = std::move(o.report_);
    backends_ = std::move(o.backends_);
    data_ = std::move(o.data_);
    base_ = o.base_;
    size_ = o.size_;
    o.backends_.clear();
  }
  return *this;
}
LoadedWeights::~LoadedWeights() { forget(); }
void LoadedWeights::forget() {
  for (Backend* b : backends_) b->forget_weights(base_, size_);
  backends_.clear();
}

LoadedWeights load_weights(const GGUFFile& file, std::span<const LoadItem> items, const LoaderOptions& o) {
  const auto t0 = Clock::now();
  LoadedWeights out;
  out.base_ = file.base();
  out.size_ = file.size();
  if (items.empty()) return out;
  if (!file.mapping()) throw Error("loader: " + file.name() + " is not a file");
  const auto& tensors = file.tensors();

  // Targets: one a backend, each with its ring of staging buffers.
  std::vector<Backend*> backends;
  for (const LoadItem& it : items) {
    if (!it.backend) throw Error("loader: an item without a backend");
    if (std::find(backends.begin(), backends.end(), it.backend) == backends.end()) backends.push_back(it.backend);
  }
  const uint64_t cap = read_cap(o);
  const uint64_t align = o.direct_io ? kDirectAlign : 1;
  std::vector<Target> targets(backends.size());
  const int n_buffers = std::max(o.buffers, std::max(1, o.readers) + 1);

  // The weights' device memory, then the spans to read.
  std::vector<std::unique_ptr<Buffer>> weights(items.size());
  std::vector<Span> spans;
  uint64_t device_bytes = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const LoadItem& it = items[i];
    if (it.tensor >= tensors.size()) throw Error("loader: no tensor " + std::to_string(it.tensor));
    const GGUFTensorInfo& t = tensors[it.tensor];
    const uint64_t end = it.rows ? it.begin + (it.rows - 1) * it.row_stride + it.row_bytes : it.end ? it.end : t.nbytes;
    if (it.begin >= end || end > t.nbytes || (it.rows && (it.row_bytes == 0 || it.row_stride < it.row_bytes)))
      throw Error("loader: bytes " + std::to_string(it.begin) + ".." + std::to_string(end) + " of tensor '" +
                  std::string(t.name) + "' (" + std::to_string(t.nbytes) + " bytes)");
    if (it.rows && it.row_stride + 2 * align > cap)
      throw Error("loader: rows of tensor '" + std::string(t.name) + "' are longer than a staging buffer");
    const uint64_t bytes = it.rows ? it.rows * it.row_bytes : end - it.begin;
    const int ti = int(std::find(backends.begin(), backends.end(), it.backend) - backends.begin());
    try {
      weights[i] = it.backend->alloc_weight(bytes);
    } catch (const Error& e) {
      throw Error("loading tensor '" + std::string(t.name) + "' (" + std::to_string(bytes) + " bytes) to " +
                  it.backend->name() + " after " + std::to_string(device_bytes >> 20) + " MiB: " + e.what());
    }
    Span sp{ti, file.data_offset() + t.offset + it.begin, end - it.begin, weights[i]->data(), it.tensor};
    if (it.rows) sp.rows = it.rows, sp.row_bytes = it.row_bytes, sp.stride = it.row_stride;
    spans.push_back(sp);
    device_bytes += bytes;
  }
  for (size_t ti = 0; ti < backends.size(); ++ti) {
    Target& t = targets[ti];
    t.backend = backends[ti];
    for (int s = 0; s < n_buffers; ++s) {
      t.staging.push_back(t.backend->alloc_host(size_t(cap)));
      t.free.push_back(s);
    }
    t.pending.resize(size_t(n_buffers));
  }
  std::vector<Read> reads = plan_reads(std::move(spans), cap, align);
  LoadReport& rep = out.report_;
  rep.alloc_seconds = seconds_since(t0);
  run_reads(file, reads, targets, nullptr, o, rep);
  targets.clear();  // staging buffers back

  for (size_t i = 0; i < items.size(); ++i) {
    const LoadItem& it = items[i];
    out.data_.push_back(weights[i]->data());
    const uint64_t bytes = it.rows ? it.rows * it.row_bytes : (it.end ? it.end : tensors[it.tensor].nbytes) - it.begin;
    it.backend->adopt_weight(tensors[it.tensor].data + it.begin, bytes, std::move(weights[i]));
  }
  out.backends_ = backends;
  rep.bytes += device_bytes;
  rep.device_bytes += device_bytes;
  rep.items += items.size();
  rep.seconds += seconds_since(t0);
  rep.weights_seconds += seconds_since(t0);
  return out;
}

void load_into_memory(const GGUFFile& file, const std::vector<bool>& skip, const LoaderOptions& o, LoadReport* report) {
  const auto t0 = Clock::now();
  MappedFile* map = file.mapping();
  if (!map) throw Error("loader: " + file.name() + " is not a file");
  if (map->is_private_memory()) return;  // read already (bench makes several backends a model)
  const auto& tensors = file.tensors();
  std::vector<Span> spans;
  spans.push_back(Span{0, 0, file.data_offset(), nullptr, SIZE_MAX});  // the header
  uint64_t bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (i < skip.size() && skip[i]) continue;
    spans.push_back(Span{0, file.data_offset() + tensors[i].offset, tensors[i].nbytes, nullptr, i});
    bytes += tensors[i].nbytes;
  }
  const uint64_t align = o.direct_io ? kDirectAlign : 1;
  LoaderOptions big = o;
  big.buffer_bytes = std::max<size_t>(o.buffer_bytes, size_t(64) << 20);  // no staging: reads straight in
  std::vector<Read> reads = plan_reads(std::move(spans), read_cap(big), align);
  std::vector<Target> targets(1);  // the host: backend null
  uint8_t* base = map->to_private_memory();
  LoadReport rep;
  run_reads(file, reads, targets, base, big, rep);
  if (report) {
    report->bytes += bytes;
    report->items += 1;
    report->read_seconds += rep.read_seconds;
    report->wait_seconds += rep.wait_seconds;
    report->readers = std::max(report->readers, rep.readers);
    report->direct_io = rep.direct_io;
    if (!rep.direct_io_note.empty()) report->direct_io_note = rep.direct_io_note;
    report->seconds += seconds_since(t0);
    report->weights_seconds += seconds_since(t0);
  }
}

}  // namespace weir
