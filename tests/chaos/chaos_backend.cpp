#include "chaos/chaos_backend.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/memory_ranges.h"
#include "backend/weight_copies.h"
#include "core/error.h"
#include "core/graph.h"

namespace weir::test {
namespace {

constexpr uint8_t kPoison = 0xFF;  // as F32: NaN; as I32: -1

// An event's state, shared by the event and the command that completes it.
struct EventState {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  void complete() {
    {
      std::lock_guard<std::mutex> lk(m);
      done = true;
    }
    cv.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lk(m);
    cv.wait(lk, [&] { return done; });
  }
};

class ChaosEvent final : public Event {
 public:
  ChaosEvent(std::shared_ptr<EventState> s, BackendStats& stats, std::mutex& stats_m)
      : s_(std::move(s)), stats_(stats), stats_m_(stats_m) {}
  void wait() override {
    {
      std::lock_guard<std::mutex> lk(stats_m_);
      ++stats_.host_waits;
    }
    s_->wait();
  }
  bool is_done() const override {
    std::lock_guard<std::mutex> lk(s_->m);
    return s_->done;
  }
  const std::shared_ptr<EventState>& state() const { return s_; }

 private:
  std::shared_ptr<EventState> s_;
  BackendStats& stats_;
  std::mutex& stats_m_;
};

// A worker thread running queued commands in order, each after a random delay.
class Worker {
 public:
  Worker(uint64_t seed, int max_delay_us) : rng_(seed), max_delay_us_(max_delay_us), t_([this] { loop(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> lk(m_);
      stop_ = true;
    }
    cv_.notify_all();
    t_.join();
  }
  void push(std::function<void()> f) {
    {
      std::lock_guard<std::mutex> lk(m_);
      q_.push_back(std::move(f));
      ++pushed_;
    }
    cv_.notify_all();
  }
  // Waits until every command pushed so far has run.
  void drain() {
    std::unique_lock<std::mutex> lk(m_);
    const uint64_t target = pushed_;
    cv_.wait(lk, [&] { return finished_ >= target; });
  }
  std::exception_ptr take_error() {
    std::lock_guard<std::mutex> lk(m_);
    return std::exchange(error_, nullptr);
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock<std::mutex> lk(m_);
        cv_.wait(lk, [&] { return stop_ || !q_.empty(); });
        if (q_.empty()) return;
        f = std::move(q_.front());
        q_.pop_front();
      }
      const int us = int(rng_() % uint64_t(max_delay_us_ + 1));
      if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
      try {
        f();
      } catch (...) {
        std::lock_guard<std::mutex> lk(m_);
        if (!error_) error_ = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lk(m_);
        ++finished_;
      }
      cv_.notify_all();
    }
  }
  std::mt19937_64 rng_;
  int max_delay_us_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  uint64_t pushed_ = 0, finished_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread t_;  // last: starts once the rest is ready
};

class ChaosBackend;

class ChaosQueue final : public Queue {
 public:
  ChaosQueue(ChaosBackend& b, Worker& w, bool compute) : b_(b), w_(w), compute_(compute) {}
  void run(Graph& g) override;
  void copy_to_device(void* dst, const void* src, size_t n) override {
    w_.push([=] { std::memcpy(dst, src, n); });
  }
  void copy_to_host(void* dst, const void* src, size_t n) override {
    std::memset(dst, kPoison, n);  // read before the copy's event: NaNs
    w_.push([=] { std::memcpy(dst, src, n); });
  }
  void copy_on_device(void* dst, const void* src, size_t n) override {
    w_.push([=] { std::memmove(dst, src, n); });
  }
  std::unique_ptr<Event> record() override;
  void wait_event(Event& e) override {
    if (auto* ce = dynamic_cast<ChaosEvent*>(&e)) {
      auto s = ce->state();
      w_.push([s] { s->wait(); });
    } else if (!e.is_host_event()) {
      e.wait();
    }
  }
  void synchronize() override;

 private:
  ChaosBackend& b_;
  Worker& w_;
  bool compute_;
};

// Zero-filled memory of the chaos device; poisoned when freed, and kept.
class ChaosBuffer final : public Buffer {
 public:
  ChaosBuffer(size_t n, MemoryRanges* ranges, std::vector<std::vector<uint8_t>>* graveyard, std::mutex* m)
      : mem_(n + 64, 0), ranges_(ranges), graveyard_(graveyard), m_(m) {
    data_ = mem_.data();
    size_ = n;
    ranges_->add(data_, n);
  }
  ~ChaosBuffer() override {
    ranges_->erase(data_);
    std::memset(mem_.data(), kPoison, mem_.size());
    std::lock_guard<std::mutex> lk(*m_);
    graveyard_->push_back(std::move(mem_));
  }

 private:
  std::vector<uint8_t> mem_;
  MemoryRanges* ranges_;
  std::vector<std::vector<uint8_t>>* graveyard_;
  std::mutex* m_;
};

class HostMemory final : public Buffer {
 public:
  explicit HostMemory(size_t n) : mem_(n + 64, 0) {
    data_ = mem_.data();
    size_ = n;
  }

 private:
  std::vector<uint8_t> mem_;
};

class ChaosBackend final : public Backend {
 public:
  explicit ChaosBackend(const ChaosOptions& o)
      : inner_(o.threads, o.cpu), compute_(o.seed * 2 + 1, o.max_delay_us), copies_(o.seed * 2 + 2, o.max_delay_us),
        queue_(*this, compute_, true), copy_queue_(*this, copies_, false) {}
  ~ChaosBackend() override {
    compute_.drain();
    copies_.drain();
  }

  std::string name() const override { return "chaos"; }
  Device device() const override { return {Device::Kind::Test, 0}; }
  bool supports(const Tensor& n) const override { return inner_.supports(n); }
  bool host_visible_memory() const override { return false; }
  Queue& queue() override { return queue_; }
  Queue& copy_queue() override { return copy_queue_; }
  bool owns(const void* p) const override { return ranges_.contains(p) || inner_.owns(p); }

  void plan(Graph& g) override {
    compute_.drain();  // nothing of an older plan of g still runs
    // The inputs this plan allocates: leaves without memory (others are
    // external: weights, state, another graph's results).
    std::vector<Tensor*>& inputs = inputs_[&g];
    inputs.clear();
    for (Tensor& t : g.tensors())
      if (t.op == Op::Leaf && !t.data) inputs.push_back(&t);
    weights_.release(g);
    weights_.point_leaves(g, /*packed=*/true);  // weights loaded ahead (packed) run from our memory
    inner_.plan(g);
    // Activations and inputs start as poison: nothing may read them before
    // a node or a copy writes them.
    for (Tensor* t : inputs) std::memset(t->data, kPoison, t->n_bytes());
    // An input that an output looks at (a cache set_rows writes) is read
    // after the run: not poisoned then.
    for (const Tensor* o : g.outputs())
      inputs.erase(std::remove(inputs.begin(), inputs.end(), o->storage()), inputs.end());
    for (Tensor& t : g.tensors())
      if (t.op != Op::Leaf && t.op != Op::View && t.op != Op::SetRows) std::memset(t.data, kPoison, t.n_bytes());
  }
  size_t planned_bytes(const Graph& g) const override { return inner_.planned_bytes(g); }
  void release(const Graph& g) override {
    compute_.drain();
    copies_.drain();
    inner_.release(g);
    weights_.release(g);
    inputs_.erase(&g);
  }
  const BackendStats& stats() const override {
    std::lock_guard<std::mutex> lk(stats_m_);
    snapshot_ = stats_;
    return snapshot_;
  }
  std::unique_ptr<Buffer> alloc(size_t bytes) override {
    return std::make_unique<ChaosBuffer>(bytes, &ranges_, &graveyard_, &graveyard_m_);
  }
  std::unique_ptr<Buffer> alloc_host(size_t bytes) override { return std::make_unique<HostMemory>(bytes); }
  // A weight's memory starts as poison: a byte the loader does not copy
  // shows in the results.
  std::unique_ptr<Buffer> alloc_weight(size_t bytes) override {
    auto b = alloc(bytes);
    std::memset(b->data(), kPoison, bytes);
    return b;
  }
  void adopt_weight(const void* host, size_t bytes, std::unique_ptr<Buffer> w) override {
    compute_.drain();
    void* d = w->data();
    weights_.add(host, bytes, d, std::shared_ptr<Buffer>(std::move(w)), true);
    std::lock_guard<std::mutex> lk(stats_m_);
    ++stats_.weights_adopted;
  }
  void forget_weights(const void* begin, size_t n) override {
    compute_.drain();
    weights_.forget(begin, n);
  }

  void enqueue_run(Graph& g) {
    std::vector<Tensor*>* inputs = &inputs_[&g];
    compute_.push([this, &g, inputs] {
      inner_.queue().run(g);
      // Copied in again before the next run, or the next run reads poison.
      for (Tensor* t : *inputs) std::memset(t->data, kPoison, t->n_bytes());
    });
    std::lock_guard<std::mutex> lk(stats_m_);
    ++stats_.graphs_run;
  }
  std::unique_ptr<Event> record_on(Worker& w) {
    auto s = std::make_shared<EventState>();
    w.push([s] { s->complete(); });
    return std::make_unique<ChaosEvent>(s, stats_, stats_m_);
  }
  void synchronize(Worker& w) {
    {
      std::lock_guard<std::mutex> lk(stats_m_);
      ++stats_.host_waits;
    }
    w.drain();
    if (std::exception_ptr e = w.take_error()) std::rethrow_exception(e);
  }

 private:
  CpuBackend inner_;
  Worker compute_, copies_;
  ChaosQueue queue_, copy_queue_;
  MemoryRanges ranges_;
  std::unordered_map<const Graph*, std::vector<Tensor*>> inputs_;
  std::vector<std::vector<uint8_t>> graveyard_;
  std::mutex graveyard_m_;
  mutable std::mutex stats_m_;
  BackendStats stats_;
  mutable BackendStats snapshot_;
  // Adopted weights only (the rest are read in place); last, since its
  // buffers go to the graveyard above when they go.
  WeightCopies weights_{true};
};

void ChaosQueue::run(Graph& g) {
  if (!compute_) throw Error("chaos backend: graphs run on the compute queue");
  b_.enqueue_run(g);
}
std::unique_ptr<Event> ChaosQueue::record() { return b_.record_on(w_); }
void ChaosQueue::synchronize() { b_.synchronize(w_); }

}  // namespace

std::unique_ptr<Backend> make_chaos_backend(const ChaosOptions& o) { return std::make_unique<ChaosBackend>(o); }

}  // namespace weir::test
