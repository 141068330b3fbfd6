// Collectives over MPI between processes (comm/mpi_comm.h).
// The C API only (OpenMPI and MPICH would pull in their C++ bindings).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "comm/mpi_comm.h"
#include "core/error.h"

namespace weir {
namespace {

bool g_started = false;

void start() {
  if (g_started) return;
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
      throw Error("MPI could not start");
    if (provided < MPI_THREAD_SERIALIZED) throw Error("MPI: this MPI cannot be called from a worker thread");
  }
  g_started = true;
}

class MpiComm final : public Collective {
 public:
  explicit MpiComm(const CommOptions& o) : opts_(o) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string kind() const override { return "mpi"; }

  void all_reduce_sum(const float* src, float* dst, size_t n, void* stream) override {
    if (stream) throw Error("mpi comm: host memory only");
    check();
    all_.resize(n * size_t(size_));
    wait(MPI_Iallgather_wrap(src, int(n), all_.data()), "all_reduce");
    std::memcpy(dst, all_.data(), n * sizeof(float));  // rank 0's, then 1's ... on every rank
    for (int r = 1; r < size_; ++r) {
      const float* p = all_.data() + size_t(r) * n;
      for (size_t i = 0; i < n; ++i) dst[i] += p[i];
    }
  }

  void all_gather_rows(const float* src, size_t src_ld, float* dst, size_t dst_ld, int64_t total, int64_t cols,
                       void* stream) override {
    if (stream) throw Error("mpi comm: host memory only");
    check();
    const Range mine = split_range(total, size_, rank_);
    send_.resize(size_t(mine.size() * cols));
    for (int64_t c = 0; c < cols; ++c)
      std::memcpy(send_.data() + size_t(c * mine.size()), src + size_t(c) * src_ld, size_t(mine.size()) * sizeof(float));
    std::vector<int> counts(static_cast<size_t>(size_)), offsets(static_cast<size_t>(size_));
    int off = 0;
    for (int r = 0; r < size_; ++r) {
      counts[size_t(r)] = int(split_range(total, size_, r).size() * cols);
      offsets[size_t(r)] = off;
      off += counts[size_t(r)];
    }
    all_.resize(size_t(off));
    MPI_Request req;
    MPI_Iallgatherv(send_.data(), int(send_.size()), MPI_FLOAT, all_.data(), counts.data(), offsets.data(), MPI_FLOAT,
                    MPI_COMM_WORLD, &req);
    wait(req, "all_gather");
    for (int r = 0; r < size_; ++r) {
      const Range rows = split_range(total, size_, r);
      const float* part = all_.data() + offsets[size_t(r)];
      for (int64_t c = 0; c < cols; ++c)
        std::memcpy(dst + size_t(c) * dst_ld + size_t(rows.begin), part + size_t(c * rows.size()),
                    size_t(rows.size()) * sizeof(float));
    }
  }

  void abort(const std::string& why) override {
    aborted_ = true;
    why_ = why;
  }

 private:
  MPI_Request MPI_Iallgather_wrap(const float* src, int n, float* out) {
    MPI_Request req;
    MPI_Iallgather(src, n, MPI_FLOAT, out, n, MPI_FLOAT, MPI_COMM_WORLD, &req);
    return req;
  }
  void check() {
    if (aborted_) throw CommError(why_);
  }
  // Polls until the collective is done; past the timeout the job ends (the
  // other processes may be stuck where this one cannot reach them).
  void wait(MPI_Request req, const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(opts_.timeout_ms);
    for (int spins = 0;; ++spins) {
      int done = 0;
      MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (done) return;
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "weir: rank %d of %d waited %.0f s in %s for the other ranks; ending the job\n", rank_,
                     size_, opts_.timeout_ms / 1000.0, what);
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
      if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  CommOptions opts_;
  int rank_ = 0, size_ = 1;
  bool aborted_ = false;
  std::string why_;
  std::vector<float> all_, send_;
};

}  // namespace

bool mpi_built() { return true; }

std::unique_ptr<Collective> make_mpi_world(const CommOptions& o) {
  start();
  return std::make_unique<MpiComm>(o);
}

void mpi_broadcast(void* data, size_t n) {
  start();
  MPI_Bcast(data, int(n), MPI_BYTE, 0, MPI_COMM_WORLD);
}

void mpi_abort(int code) {
  if (g_started) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

void mpi_finish() {
  if (!g_started) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace weir
