#include "comm/thread_comm.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>

namespace weir {
namespace {

struct Group {
  int n;
  CommOptions opts;
  std::mutex m;
  std::condition_variable cv;
  uint64_t generation = 0;
  int arrived = 0;
  bool aborted = false;
  std::string why;
  struct Part {
    const float* src = nullptr;
    size_t ld = 0;
  };
  std::vector<Part> parts;

  // Waits until every rank has arrived (or throws CommError).
  void barrier(int rank, const char* what) {
    std::unique_lock<std::mutex> lk(m);
    if (aborted) throw CommError(why);
    const uint64_t gen = generation;
    if (++arrived == n) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(opts.timeout_ms);
    while (generation == gen && !aborted) {
      if (cv.wait_until(lk, deadline) == std::cv_status::timeout && generation == gen && !aborted) {
        aborted = true;
        why = std::string("tensor parallel: rank ") + std::to_string(rank) + " waited " +
              std::to_string(opts.timeout_ms / 1000.0) + " s in " + what + " for the other ranks";
        cv.notify_all();
      }
    }
    if (aborted) throw CommError(why);
  }
  void abort(const std::string& reason) {
    std::lock_guard<std::mutex> lk(m);
    if (!aborted) {
      aborted = true;
      why = reason;
    }
    cv.notify_all();
  }
};

class ThreadComm final : public Collective {
 public:
  ThreadComm(std::shared_ptr<Group> g, int rank) : g_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_->n; }
  std::string kind() const override { return "threads"; }

  void all_reduce_sum(const float* src, float* dst, size_t n, void* stream) override {
    if (stream) throw Error("thread comm: host memory only");
    g_->parts[size_t(rank_)] = {src, n};
    g_->barrier(rank_, "all_reduce");
    // Every rank adds the same values in the same order: rank 0's, then 1's ...
    // In place (src == dst) the sum goes to a scratch first: others still read src.
    float* out = dst;
    if (src == dst) {
      tmp_.resize(n);
      out = tmp_.data();
    }
    std::memcpy(out, g_->parts[0].src, n * sizeof(float));
    for (int r = 1; r < g_->n; ++r) {
      const float* p = g_->parts[size_t(r)].src;
      for (size_t i = 0; i < n; ++i) out[i] += p[i];
    }
    g_->barrier(rank_, "all_reduce");
    if (out != dst) std::memcpy(dst, out, n * sizeof(float));
  }

  void all_gather_rows(const float* src, size_t src_ld, float* dst, size_t dst_ld, int64_t total, int64_t cols,
                       void* stream) override {
    if (stream) throw Error("thread comm: host memory only");
    g_->parts[size_t(rank_)] = {src, src_ld};
    g_->barrier(rank_, "all_gather");
    for (int r = 0; r < g_->n; ++r) {
      const Range rows = split_range(total, g_->n, r);
      const Group::Part p = g_->parts[size_t(r)];
      for (int64_t c = 0; c < cols; ++c)
        std::memcpy(dst + size_t(c) * dst_ld + size_t(rows.begin), p.src + size_t(c) * p.ld,
                    size_t(rows.size()) * sizeof(float));
    }
    g_->barrier(rank_, "all_gather");
  }

  void abort(const std::string& why) override { g_->abort(why); }

 private:
  std::shared_ptr<Group> g_;
  int rank_;
  std::vector<float> tmp_;
};

}  // namespace

std::vector<std::unique_ptr<Collective>> make_thread_comms(int n, const CommOptions& o) {
  if (n < 1) throw Error("thread comm: a group needs at least one rank");
  auto g = std::make_shared<Group>();
  g->n = n;
  g->opts = o;
  g->parts.resize(size_t(n));
  std::vector<std::unique_ptr<Collective>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<ThreadComm>(g, r));
  return out;
}

}  // namespace weir
