#include "sched/scheduler.h"

#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace weir::sched {
namespace {

using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Host memory the scheduler hands out (the Session's inputs), known as its
// own while it lives.
class HostMemory final : public Buffer {
 public:
  HostMemory(std::unique_ptr<Buffer> b, MemoryRanges* ranges) : b_(std::move(b)), ranges_(ranges) {
    data_ = b_->data();
    size_ = b_->size();
    ranges_->add(data_, size_);
  }
  ~HostMemory() override { ranges_->erase(data_); }

 private:
  std::unique_ptr<Buffer> b_;
  MemoryRanges* ranges_;
};

// Done when every event it holds is: one per device with queued work.
class SchedEvent final : public Event {
 public:
  SchedEvent(std::vector<std::unique_ptr<Event>> events, uint64_t* host_waits)
      : events_(std::move(events)), host_waits_(host_waits) {}
  void wait() override {
    ++*host_waits_;
    for (auto& e : events_) e->wait();
  }
  bool is_done() const override {
    for (auto& e : events_)
      if (!e->is_done()) return false;
    return true;
  }
  bool is_host_event() const override { return events_.empty(); }
  const std::vector<std::unique_ptr<Event>>& events() const { return events_; }

 private:
  std::vector<std::unique_ptr<Event>> events_;
  uint64_t* host_waits_;
};

}  // namespace

// A run's graph on its backend, and what is copied into it before it runs.
struct SubRun {
  int backend = 0;
  std::unique_ptr<Graph> graph;
  struct Copy {
    Tensor* dst;          // a leaf of graph (allocated by its backend's plan)
    const Tensor* src;    // the original tensor (its data: where it was computed, or a host input)
    int from;             // backend index or kHost
    size_t bytes = 0;     // from the start (0: the whole tensor)
  };
  std::vector<Copy> copies;
};

// A product's weight streamed to the offload backend before its run.
struct Stream {
  size_t run;
  const void* host;  // the weight's bytes in host memory
  size_t bytes;
  int slot;
};

struct Scheduler::Plan {
  SplitPlan split;
  std::vector<SubRun> subs;
  std::vector<Stream> streams;  // in run order
};

class SchedQueue final : public Queue {
 public:
  explicit SchedQueue(Scheduler& s) : s_(s) {}
  void run(Graph& g) override { s_.run_graph(g); }
  void copy_to_device(void* dst, const void* src, size_t n) override {
    const int d = s_.owner(dst);
    if (!device(d)) return void(std::memcpy(dst, src, n));
    s_.backends_[size_t(d)]->queue().copy_to_device(dst, src, n);
    s_.dirty_[size_t(d)] = true;
  }
  void copy_to_host(void* dst, const void* src, size_t n) override {
    const int from = s_.owner(src);
    if (!device(from)) return void(std::memcpy(dst, src, n));
    s_.backends_[size_t(from)]->queue().copy_to_host(dst, src, n);
    s_.dirty_[size_t(from)] = true;
  }
  void copy_on_device(void* dst, const void* src, size_t n) override {
    const int from = s_.owner(src), to = s_.owner(dst);
    if (!device(from) && !device(to)) return void(std::memmove(dst, src, n));
    if (!device(from)) return copy_to_device(dst, src, n);
    Queue& fq = s_.backends_[size_t(from)]->queue();
    if (!device(to)) {
      // Into host memory that the next run may read at once: wait for it.
      fq.copy_to_host(dst, src, n);
      fq.record()->wait();
      ++s_.own_host_waits_;
      return;
    }
    Queue& tq = s_.backends_[size_t(to)]->queue();
    if (from != to) tq.wait_event(*fq.record());
    tq.copy_on_device(dst, src, n);
    s_.dirty_[size_t(to)] = true;
  }
  std::unique_ptr<Event> record() override {
    std::vector<std::unique_ptr<Event>> events;
    for (size_t i = 0; i < s_.backends_.size(); ++i)
      if (s_.dirty_[i]) events.push_back(s_.backends_[i]->queue().record());
    return std::make_unique<SchedEvent>(std::move(events), &s_.own_host_waits_);
  }
  void wait_event(Event& e) override {
    if (e.is_host_event()) return;
    for (Backend* b : s_.backends_) b->queue().wait_event(e);
  }
  void synchronize() override {
    ++s_.own_host_waits_;
    const auto t0 = Clock::now();
    for (size_t i = 0; i < s_.backends_.size(); ++i)
      if (s_.dirty_[i]) {
        s_.backends_[i]->queue().synchronize();
        s_.dirty_[i] = false;
      }
    if (s_.opts_.profile) {
      s_.profile_.wait_s += seconds(t0, Clock::now());
      ++s_.profile_.host_waits;
    }
  }

 private:
  bool device(int b) const { return b >= 0 && !s_.backends_[size_t(b)]->host_visible_memory(); }
  Scheduler& s_;
};

Scheduler::Scheduler(std::vector<Backend*> backends, Placement placement, SchedOptions options)
    : backends_(std::move(backends)), placement_(std::move(placement)), opts_(options) {
  if (backends_.empty()) throw Error("scheduler: no backends");
  if (opts_.host_backend < 0 || opts_.host_backend >= int(backends_.size()) ||
      !backends_[size_t(opts_.host_backend)]->host_visible_memory())
    throw Error("scheduler: the host backend must be one whose memory the host reads");
  dirty_.assign(backends_.size(), false);
  queue_ = std::make_unique<SchedQueue>(*this);
}

Scheduler::~Scheduler() {
  for (auto& [g, p] : plans_)
    for (SubRun& s : p->subs) backends_[size_t(s.backend)]->release(*s.graph);
}

std::string Scheduler::name() const {
  std::string n;
  for (Backend* b : backends_) n += (n.empty() ? "" : "+") + b->device().name();
  return n;
}

Device Scheduler::device() const {
  for (Backend* b : backends_)
    if (!b->host_visible_memory()) return b->device();
  return backends_[size_t(opts_.host_backend)]->device();
}

bool Scheduler::supports(const Tensor& node) const {
  for (Backend* b : backends_)
    if (b->supports(node)) return true;
  return false;
}

bool Scheduler::host_visible_memory() const {
  const int o = placement_.output_backend;
  return o < 0 || o >= int(backends_.size()) || backends_[size_t(o)]->host_visible_memory();
}

Queue& Scheduler::queue() { return *queue_; }
Queue& Scheduler::copy_queue() { return *queue_; }

bool Scheduler::owns(const void* p) const { return owner(p) != kHost || host_.contains(p); }

int Scheduler::owner(const void* p) const {
  for (size_t i = 0; i < backends_.size(); ++i)
    if (backends_[i]->owns(p)) return int(i);
  return kHost;
}

std::unique_ptr<Buffer> Scheduler::alloc(size_t bytes) { return std::make_unique<HostMemory>(alloc_host(bytes), &host_); }

std::unique_ptr<Buffer> Scheduler::alloc_host(size_t bytes) {
  for (Backend* b : backends_)
    if (!b->host_visible_memory()) return b->alloc_host(bytes);  // pinned for its copies
  return backends_[size_t(opts_.host_backend)]->alloc_host(bytes);
}

std::unique_ptr<Buffer> Scheduler::alloc_state(int64_t layer, size_t bytes) {
  int b = opts_.host_backend;
  if (layer >= 0 && layer < int64_t(placement_.layer_backend.size())) b = placement_.layer_backend[size_t(layer)];
  return backends_[size_t(b)]->alloc(bytes);
}

AssignRules Scheduler::rules() const {
  AssignRules r;
  for (Backend* b : backends_) r.host_visible.push_back(b->host_visible_memory());
  r.supports = [this](int b, const Tensor& n) { return backends_[size_t(b)]->supports(n); };
  r.weight_home = placement_.weight_home;
  r.state_home = [this](const Tensor& leaf) { return leaf.data ? owner(leaf.data) : kHost; };
  r.offload_backend = opts_.offload_backend;
  r.offload_min_batch = opts_.offload_min_batch;
  r.host_backend = opts_.host_backend;
  return r;
}

void Scheduler::plan(Graph& g) {
  release(g);
  auto p = std::make_unique<Plan>();
  const AssignRules r = rules();
  const Assignment a = assign_backends(g, r);
  p->split = split_graph(g, a, r.host_visible);
  std::unordered_map<const Tensor*, Tensor*> made;  // original node -> its copy in its run's graph
  for (const Run& run : p->split.runs)
    if (run.streamed && slots_.empty()) {
      // The first streamed product: slots for the largest weight, and the
      // host's weights registered with the device (pinned: copies go
      // straight from the file's pages).
      Backend& off = *backends_[size_t(run.backend)];
      const size_t slot = std::max(placement_.largest_host_weight, size_t(1));
      for (int k = 0; k < std::max(2, opts_.stream_slots); ++k) slots_.push_back(off.alloc(slot));
      if (placement_.host_weights)
        pinned_ = off.register_host_memory(placement_.host_weights, placement_.host_weights_bytes);
    }
  for (size_t r = 0; r < p->split.runs.size(); ++r) {
    const Run& run = p->split.runs[r];
    SubRun sub;
    sub.backend = run.backend;
    sub.graph = std::make_unique<Graph>();
    Graph& sg = *sub.graph;
    Backend& b = *backends_[size_t(run.backend)];
    std::unordered_map<const Tensor*, Tensor*> local;  // original -> this run's tensor
    // A leaf of this run's graph standing for `s`: memory of its own
    // (allocated by the plan), or, when data is given, that memory.
    auto leaf_for = [&](const Tensor* s, void* data) {
      Tensor* c = data ? sg.external(s->dtype, {s->ne[0], s->ne[1], s->ne[2], s->ne[3]}, data, s->name)
                       : sg.input(s->dtype, {s->ne[0], s->ne[1], s->ne[2], s->ne[3]}, s->name);
      for (int i = 0; i < kMaxDims; ++i) c->nb[i] = s->nb[i];
      return c;
    };
    // A streamed product's weight: the slot it is copied into.
    const Tensor* streamed_w = run.streamed ? run.nodes.front()->src[0]->storage() : nullptr;
    if (streamed_w) {
      if (streamed_w->n_bytes() > slots_[0]->size())
        throw Error("scheduler: weight '" + streamed_w->name + "' is larger than the streaming slots");
      const int slot = int(p->streams.size() % slots_.size());
      p->streams.push_back({r, streamed_w->data, streamed_w->n_bytes(), slot});
      local[streamed_w] = leaf_for(streamed_w, slots_[size_t(slot)]->data());
    }
    std::function<Tensor*(const Tensor*)> map = [&](const Tensor* s) -> Tensor* {
      if (auto it = local.find(s); it != local.end()) return it->second;
      Tensor* c;
      if (s->op == Op::View) {
        c = sg.clone(*s, map);
      } else if (s->op == Op::Leaf) {
        // A graph input a device reads, or state read away from its home:
        // copied in (split.h); else read in place.
        const Transfer* t = nullptr;
        for (const Transfer& x : run.copies_in)
          if (x.tensor == s) t = &x;
        c = t ? leaf_for(s, nullptr) : sg.clone(*s, map);
        if (t) sub.copies.push_back({c, s, t->from, t->bytes});
      } else {  // computed by an earlier run
        const Tensor* there = made.at(s);
        const int from = a.backend[size_t(s->id)];
        if (from == run.backend) {
          c = leaf_for(s, there->data);
        } else {
          c = leaf_for(s, nullptr);
          sub.copies.push_back({c, s, from});
        }
      }
      local[s] = c;
      return c;
    };
    for (const Tensor* n : run.nodes) local[n] = sg.clone(*n, map);
    for (const Tensor* o : run.outputs) sg.mark_output(local.at(o));
    b.plan(sg);
    for (const Tensor* n : run.nodes) made[n] = local.at(n);
    p->subs.push_back(std::move(sub));
  }
  // The original graph's tensors see where their values are (the Session
  // copies the outputs from there).
  for (auto& [orig, copy] : made) const_cast<Tensor*>(orig)->data = copy->data;
  plans_[&g] = std::move(p);
}

void Scheduler::run_graph(Graph& g) {
  auto it = plans_.find(&g);
  if (it == plans_.end()) throw Error("scheduler: graph run before plan()");
  Plan& p = *it->second;
  int wait_index = 0;
  auto skip = [&] { return wait_index++ == opts_.skip_wait; };
  // Op offload: weight i streams into slot i % K on the offload backend's
  // copy queue once the product that last used that slot is done, up to K
  // ahead of the product that computes; that product waits for its copy.
  const size_t n_streams = p.streams.size(), k_slots = slots_.size();
  std::vector<std::unique_ptr<Event>> ready(n_streams), done(n_streams);
  size_t issued = 0, next_stream = 0;
  auto issue_streams = [&](size_t upto) {
    for (; issued < n_streams && issued <= upto; ++issued) {
      const Stream& st = p.streams[issued];
      Queue& cq = backends_[size_t(p.subs[st.run].backend)]->copy_queue();
      if (issued >= k_slots) cq.wait_event(*done[issued - k_slots]);
      else if (last_stream_done_) cq.wait_event(*last_stream_done_);  // the last step's products
      cq.copy_to_device(slots_[size_t(st.slot)]->data(), st.host, st.bytes);
      ready[issued] = cq.record();
    }
  };
  issue_streams(k_slots - 1);
  for (size_t r = 0; r < p.subs.size(); ++r) {
    const Run& run = p.split.runs[r];
    SubRun& sub = p.subs[r];
    Backend& b = *backends_[size_t(sub.backend)];
    Queue& q = b.queue();
    if (run.streamed) {
      issue_streams(next_stream + k_slots - 1);
      q.wait_event(*ready[next_stream]);
    }
    for (int d : run.device_waits_on) {
      std::unique_ptr<Event> e = backends_[size_t(d)]->queue().record();
      if (!skip()) q.wait_event(*e);
    }
    for (const SubRun::Copy& c : sub.copies) {
      const size_t n = c.bytes ? c.bytes : c.src->n_bytes();
      if (c.from == kHost || backends_[size_t(c.from)]->host_visible_memory()) {
        q.copy_to_device(c.dst->data, c.src->data, n);
      } else if (b.host_visible_memory()) {
        backends_[size_t(c.from)]->queue().copy_to_host(c.dst->data, c.src->data, n);
      } else {
        q.copy_on_device(c.dst->data, c.src->data, n);
      }
    }
    for (int d : run.host_waits_on) {
      std::unique_ptr<Event> e = backends_[size_t(d)]->queue().record();
      if (skip()) continue;
      const auto t0 = Clock::now();
      e->wait();
      ++own_host_waits_;
      dirty_[size_t(d)] = false;
      if (opts_.profile) {
        profile_.wait_s += seconds(t0, Clock::now());
        ++profile_.host_waits;
      }
    }
    const auto t0 = Clock::now();
    q.run(*sub.graph);
    if (opts_.profile) (b.host_visible_memory() ? profile_.host_run_s : profile_.issue_s) += seconds(t0, Clock::now());
    if (!b.host_visible_memory()) dirty_[size_t(sub.backend)] = true;
    if (run.streamed) done[next_stream++] = q.record();
  }
  if (n_streams) last_stream_done_ = std::move(done[n_streams - 1]);
  ++stats_.graphs_run;
  ++profile_.steps;
}

size_t Scheduler::planned_bytes(const Graph& g) const {
  auto it = plans_.find(&g);
  if (it == plans_.end()) return 0;
  size_t n = 0;
  for (const SubRun& s : it->second->subs) n += backends_[size_t(s.backend)]->planned_bytes(*s.graph);
  return n;
}

void Scheduler::release(const Graph& g) {
  auto it = plans_.find(&g);
  if (it == plans_.end()) return;
  for (SubRun& s : it->second->subs) backends_[size_t(s.backend)]->release(*s.graph);
  plans_.erase(it);
}

const SplitPlan* Scheduler::split_of(const Graph& g) const {
  auto it = plans_.find(&g);
  return it == plans_.end() ? nullptr : &it->second->split;
}

std::string SchedProfile::describe() const {
  const double n = double(steps ? steps : 1);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "per step: %.3f ms in the host's runs, %.3f ms waiting for devices (%.2f waits), %.3f ms issuing "
                "device work (%llu steps)",
                host_run_s / n * 1e3, wait_s / n * 1e3, double(host_waits) / n, issue_s / n * 1e3,
                (unsigned long long)steps);
  return buf;
}

const BackendStats& Scheduler::stats() const {
  BackendStats s;
  s.host_waits = own_host_waits_;
  s.graphs_run = stats_.graphs_run;
  for (Backend* b : backends_) {
    const BackendStats& bs = b->stats();
    s.graphs_captured += bs.graphs_captured;
    s.graphs_replayed += bs.graphs_replayed;
    s.planned_launches += bs.planned_launches;
    s.recorded_nodes += bs.recorded_nodes;
  }
  stats_ = s;
  return stats_;
}

}  // namespace weir::sched
