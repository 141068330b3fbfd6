#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "backend/activation_plan.h"
#include "backend/arena_planner.h"
#include "backend/cpu/act_quant.h"
#include "backend/cpu/amx.h"
#include "backend/cpu/amx_product.h"
#include "backend/cpu/barrier_plan.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_profile.h"
#include "backend/cpu/file_pages.h"
#include "backend/cpu/ops_common.h"
#include "backend/cpu/repack.h"
#include "backend/cpu/qdot.h"
#include "core/error.h"
#include "core/graph.h"

namespace weir {
namespace {

cpu::NumaPlan numa_plan_for(const CpuOptions& o, int n_threads) {
  const int n = std::max(1, n_threads);
  if (o.numa == cpu::NumaMode::Off) return cpu::make_numa_plan(cpu::NumaTopology{}, cpu::NumaMode::Off, n);
  return cpu::make_numa_plan(cpu::NumaTopology::read(o.numa_sysfs_root, cpu::affinity_cpus()), o.numa, n);
}

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

// Host memory, zero-filled; registered in `owned` (when given) while it lives.
class HostBuffer final : public Buffer {
 public:
  HostBuffer(size_t n, MemoryRanges* owned) : owned_(owned) {
    if (posix_memalign(&data_, kArenaAlign, n ? n : 1) != 0)
      throw Error("cpu backend: cannot allocate " + std::to_string(n) + " bytes");
    std::memset(data_, 0, n);
    size_ = n;
    if (owned_) owned_->add(data_, n);
  }
  ~HostBuffer() override {
    if (owned_) owned_->erase(data_);
    std::free(data_);
  }

 private:
  MemoryRanges* owned_;
};

}  // namespace

struct CpuBackend::Plan {
  std::unique_ptr<void, AlignedFree> arena;
  size_t bytes = 0;
  std::vector<Tensor*> nodes;  // compute nodes in order
  // For mul_mat nodes whose activations are rounded first (act_quant.h): the
  // node as run, reading x from a rounded copy in the arena. Indexed by
  // position in `nodes`; null where x is used as it is.
  std::vector<Tensor*> rounded;
  std::deque<Tensor> shadows;
  // Whether threads meet before node i's activation rounding / before node
  // i itself (barrier_plan.h).
  std::vector<bool> barrier_round, barrier_node;
  // Whether node i makes its shadow x (the first of the nodes sharing it).
  std::vector<bool> round_here;
  // Whether node i (an rms_norm) runs fused with node i+1 (its mul).
  std::vector<bool> fuse_next;
  // For mul_mat nodes whose weight the backend repacked: that copy (null
  // elsewhere); their x is quantized.
  std::vector<const cpu::RepackedWeight*> repacked;
  // For mul_mat nodes on AMX tiles (amx_product.h): their x is packed.
  std::vector<bool> amx;
  // Where the graph's run is cut into jobs, so that a stop request
  // (CpuOptions::stop) is seen between them: the first node of each job
  // after the first. Empty: one job.
  std::vector<size_t> segment_starts;
};

class CpuEvent final : public Event {
 public:
  explicit CpuEvent(BackendStats& s) : stats_(s) {}
  void wait() override { ++stats_.host_waits; }
  bool is_done() const override { return true; }
  bool is_host_event() const override { return true; }

 private:
  BackendStats& stats_;
};

class CpuQueue final : public Queue {
 public:
  explicit CpuQueue(CpuBackend& b) : b_(b) {}
  void run(Graph& g) override { b_.run_graph(g); }
  void copy_to_device(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void copy_to_host(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void copy_on_device(void* dst, const void* src, size_t n) override { std::memmove(dst, src, n); }
  std::unique_ptr<Event> record() override { return std::make_unique<CpuEvent>(b_.stats_); }
  // Commands run inline: a later one waits for a device's event on the host.
  void wait_event(Event& e) override {
    if (!e.is_host_event()) e.wait();
  }
  void synchronize() override { ++b_.stats_.host_waits; }

 private:
  CpuBackend& b_;
};

CpuBackend::CpuBackend(int n_threads, CpuOptions opts)
    : opts_(std::move(opts)),
      numa_(numa_plan_for(opts_, n_threads)),
      pool_(n_threads, numa_.group_of_thread, opts_.spin_barriers ? cpu::WaitMode::Spin : cpu::WaitMode::Adaptive),
      queue_(std::make_unique<CpuQueue>(*this)) {
  if (numa_.pins()) pin_threads();
  if (opts_.profile) profile_ = std::make_unique<cpu::CpuProfile>();
}

CpuBackend::~CpuBackend() {
  if (profile_) std::fputs(profile_->table(pool_.size()).c_str(), stderr);
  // The caller's thread is worker 0 and was pinned with the rest: give it
  // back the CPUs it had.
  if (!caller_affinity_.empty()) cpu::set_affinity(caller_affinity_);
}

// Workers are persistent, so one job in which each thread pins itself lasts
// for the pool's life.
void CpuBackend::pin_threads() {
  caller_affinity_ = cpu::affinity_cpus();
  std::atomic<int> err{0};
  pool_.run([&](int ith) {
    const cpu::NumaGroup& g = numa_.groups[size_t(numa_.group_of_thread[size_t(ith)])];
    if (int e = cpu::set_affinity(g.cpus)) err = e;
  });
  numa_report_.pin_errno = err.load();
}

std::string NumaReport::describe() const {
  std::string s;
  if (pin_errno) s += std::string("pinning failed (") + std::strerror(pin_errno) + "); ";
  if (weights == 0) return s + "no weights placed";
  char buf[96];
  std::snprintf(buf, sizeof buf, "%zu weights (%.1f MiB) copied into node memory; pages meant for ", weights,
                double(bytes) / (1 << 20));
  s += buf;
  bool first = true;
  for (auto& [node, pages] : planned_pages) {
    s += (first ? "node " : ", node ") + std::to_string(node) + ": " + std::to_string(pages);
    first = false;
  }
  s += "; found on " + census.describe();
  if (bind_errno) s += std::string("; mbind failed (") + std::strerror(bind_errno) + "), pages placed by first touch";
  return s;
}

void CpuBackend::place_weights(Graph& g) {
  if (!numa_.place_weights) return;
  // The KV cache is a leaf too, but written (set_rows): never copied.
  std::unordered_set<const Tensor*> written;
  for (Tensor& t : g.tensors())
    if (t.op == Op::SetRows) written.insert(t.storage());
  struct Copy {
    const char* src;
    char* dst;
    int64_t rows;
    size_t row_bytes;
  };
  std::vector<Copy> copies;
  std::vector<int> nodes;
  for (const cpu::NumaGroup& grp : numa_.groups) nodes.push_back(grp.node);
  const size_t page = cpu::page_size();
  for (Tensor& t : g.tensors()) {
    if (t.op != Op::MulMat) continue;
    const Tensor* w = t.src[0];
    if (w->op != Op::Leaf || !w->data || written.count(w) || w->ne[2] != 1 || w->ne[3] != 1 ||
        !w->is_contiguous() || weights_.is_copy(w->data) || weights_.find(w->data, w->n_bytes()))
      continue;
    const auto ranges = cpu::group_pages(numa_, w->ne[1], w->nb[1], cpu::kNumaRowAlign, page);
    auto buf = std::make_shared<cpu::NodeBuffer>(w->n_bytes(), ranges, nodes);
    if (buf->bind_errno()) numa_report_.bind_errno = buf->bind_errno();
    for (size_t i = 0; i < ranges.size(); ++i) numa_report_.planned_pages[nodes[i]] += (ranges[i].end - ranges[i].begin) / page;
    copies.push_back({static_cast<const char*>(w->data), static_cast<char*>(buf->data()), w->ne[1], w->nb[1]});
    ++numa_report_.weights;
    numa_report_.bytes += w->n_bytes();
    weights_.add(w->data, w->n_bytes(), buf->data(), buf);
  }
  // Each node's threads copy its rows: first touch agrees with the binding
  // even where mbind was refused.
  if (!copies.empty()) pool_.run([&](int ith) {
    const int gi = numa_.group_of_thread[size_t(ith)];
    const cpu::NumaGroup& grp = numa_.groups[size_t(gi)];
    const size_t k = size_t(ith - grp.first_thread), n = size_t(grp.n_threads);
    for (const Copy& c : copies) {
      int64_t r0, r1;
      numa_.rows(gi, c.rows, cpu::kNumaRowAlign, &r0, &r1);
      const size_t lo = size_t(r0) * c.row_bytes, hi = size_t(r1) * c.row_bytes;
      const size_t a = lo + (hi - lo) * k / n, b = lo + (hi - lo) * (k + 1) / n;
      std::memcpy(c.dst + a, c.src + a, b - a);
    }
  });
  for (const Copy& c : copies) numa_report_.census += cpu::page_census(c.dst, size_t(c.rows) * c.row_bytes);
  // Every leaf that saw an original now sees its copy (a tied embedding is
  // read by get_rows too).
  weights_.point_leaves(g);
}

Queue& CpuBackend::queue() { return *queue_; }

Queue& CpuBackend::copy_queue() { return *queue_; }

std::unique_ptr<Buffer> CpuBackend::alloc(size_t bytes) { return std::make_unique<HostBuffer>(bytes, &owned_); }
std::unique_ptr<Buffer> CpuBackend::alloc_host(size_t bytes) { return std::make_unique<HostBuffer>(bytes, nullptr); }

bool CpuBackend::owns(const void* p) const { return owned_.contains(p); }

bool CpuBackend::supports(const Tensor& t) const {
  switch (t.op) {
    case Op::MulMat:
    case Op::MulMatId:
    case Op::GetRows: return traits(t.src[0]->dtype).dequantizable;
    case Op::TopK:
    case Op::MoeWeights:
    case Op::MoeSum:
    case Op::RmsNorm:
    case Op::LayerNorm:
    case Op::Gelu:
    case Op::Mul:
    case Op::Add:
    case Op::Scale:
    case Op::Softcap:
    case Op::Rope:
    case Op::GeluMul:
    case Op::SiluMul:
    case Op::SwigluOai:
    case Op::Attention:
    case Op::SetRows:
    case Op::Sample:
    case Op::AllowTokens:
    case Op::AllReduce:
    case Op::AllGather:
    case Op::View:
    case Op::Leaf: return true;
    default: return false;
  }
}

void CpuBackend::release(const Graph& g) {
  weights_.release(g);
  auto it = plans_.find(&g);
  if (it == plans_.end()) return;
  if (it->second->arena) owned_.erase(it->second->arena.get());
  plans_.erase(it);
}

size_t CpuBackend::planned_bytes(const Graph& g) const {
  auto it = plans_.find(&g);
  return it == plans_.end() ? 0 : it->second->bytes;
}

namespace {

cpu::MemRange bytes_of(const Tensor* t) {
  const Tensor* s = t->storage();
  const auto b = reinterpret_cast<uintptr_t>(s->data);
  return {b, b + s->n_bytes()};
}

}  // namespace

// Stages in run order: each rounded node's rounding, then each node.
// CpuOptions::all_barriers keeps a barrier before every stage (for comparisons).
void CpuBackend::plan_node_barriers(Plan& p) const {
  p.fuse_next.assign(p.nodes.size(), false);
  for (size_t i = 0; i + 1 < p.nodes.size(); ++i)
    // Not where the planner put the mul's output over the norm's input (freed
    // once the norm has run): fused, rows of one would overwrite the other.
    p.fuse_next[i] = !p.rounded[i] && !p.rounded[i + 1] && !(i > 0 && p.fuse_next[i - 1]) &&
                     cpu::can_fuse_rms_norm_mul(*p.nodes[i], *p.nodes[i + 1]) &&
                     !bytes_of(p.nodes[i + 1]).overlaps(bytes_of(p.nodes[i]->src[0]));
  std::vector<cpu::Stage> stages;
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    if (i > 0 && p.fuse_next[i - 1]) {  // part of the previous stage
      stages.back().reads.push_back(bytes_of(p.nodes[i]->src[1]));
      stages.back().writes.push_back(bytes_of(p.nodes[i]));
      continue;
    }
    const Tensor* t = p.nodes[i];
    if (const Tensor* r = p.rounded[i]) {
      if (p.round_here[i]) stages.push_back({{bytes_of(t->src[1])}, {bytes_of(r->src[1])}});
      t = r;
    }
    cpu::Stage st;
    for (const Tensor* s : t->src)
      if (s) st.reads.push_back(bytes_of(s));
    st.writes.push_back(bytes_of(t));
    stages.push_back(std::move(st));
  }
  std::vector<bool> b = cpu::plan_barriers(stages);
  if (opts_.all_barriers) b.assign(b.size(), true);
  if (!b.empty()) b[0] = false;  // the job's start
  p.barrier_round.assign(p.nodes.size(), false);
  p.barrier_node.assign(p.nodes.size(), false);
  size_t k = 0;
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    if (i > 0 && p.fuse_next[i - 1]) continue;
    if (p.rounded[i] && p.round_here[i]) p.barrier_round[i] = b[k++];
    p.barrier_node[i] = b[k++];
  }
}

// Multiply-adds of a node, roughly: what its run costs.
static double node_macs(const Tensor& t) {
  switch (t.op) {
    case Op::MulMat:
    case Op::MulMatId: return double(t.n_elements()) * double(t.src[0]->ne[0]);
    case Op::Attention: return 2.0 * double(t.src[0]->n_elements()) * double(t.src[1]->ne[2]);
    default: return double(t.n_elements());
  }
}

void CpuBackend::plan_segments(Plan& p) const {
  p.segment_starts.clear();
  if (!opts_.stop) return;
  double macs = 0;
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    if (macs >= opts_.segment_macs && !(i > 0 && p.fuse_next[i - 1])) {
      p.segment_starts.push_back(i);
      macs = 0;
    }
    macs += node_macs(*p.nodes[i]);
  }
}

// The repacked copy of weight w, made (by every thread, groups split among
// them) the first time a plan asks; null where w has no repacked layout or
// repacking is off.
// Not in exact mode (llama_rounding off): bf16 tiles round x and the
// weights, and that mode promises the float reference's numerics.
bool CpuBackend::amx_on() const {
  return opts_.amx && opts_.llama_rounding && cpu::amx_support().usable() && cpu::amx_support().bf16;
}

const cpu::RepackedWeight* CpuBackend::repacked_for(const Tensor& w) {
  if (!opts_.repack || numa_.place_weights || w.op != Op::Leaf || !w.data || w.ne[2] * w.ne[3] != 1 ||
      !cpu::can_repack(w.dtype, w.ne[0]) || !cpu::repacked_tile(w.dtype))
    return nullptr;
  const RepackKey key{w.data, w.ne[1], w.nb[1]};
  auto it = repacked_.find(key);
  if (it != repacked_.end()) return it->second.get();
  auto rw = std::make_unique<cpu::RepackedWeight>();
  rw->type = w.dtype;
  rw->K = w.ne[0];
  rw->N = w.ne[1];
  rw->groups = (w.ne[1] + cpu::kRepackRows - 1) / cpu::kRepackRows;
  rw->group_bytes = cpu::repacked_group_bytes(w.dtype, w.ne[0]);
  const size_t bytes = rw->group_bytes * size_t(rw->groups);
  void* mem = nullptr;
  if (posix_memalign(&mem, kArenaAlign, bytes) != 0)
    throw Error("cpu backend: cannot allocate " + std::to_string(bytes) + " bytes to repack " + w.name);
  rw->keep.reset(mem, std::free);
  rw->data = static_cast<uint8_t*>(mem);
  const auto* src = static_cast<const uint8_t*>(w.data);
  cpu::RepackedWeight& r = *rw;
  pool_.run([&](int ith) {
    const int64_t g0 = r.groups * ith / pool_.size(), g1 = r.groups * (ith + 1) / pool_.size();
    cpu::repack_groups(r.type, src, w.nb[1], r.K, r.N, g0, g1, r.data + size_t(g0) * r.group_bytes);
  });
  if (opts_.release_file_pages && !amx_on())
    cpu::release_file_pages(w.data, size_t(w.nb[1]) * size_t(w.ne[1]));
  return repacked_.emplace(key, std::move(rw)).first->second.get();
}

void CpuBackend::plan(Graph& g) {
  release(g);        // planned again: the old plan goes
  place_weights(g);  // first: views of weights take their data below
  auto& tensors = g.tensors();
  auto plan = std::make_unique<Plan>();
  // Products that read the same x with the same activation type (q, k and v;
  // gate and up) share one shadow: x as llama.cpp's quantized dot products
  // see it (quantized for the integer kernels, qdot.h, where W has them, else
  // rounded floats for the float kernels), made by the first and held until
  // the last has run (an ExtraBuffer of the shared activation planner).
  auto shadow_type = [&](const Tensor& t) {
    return bool(cpu::qdot_kernels(t.src[0]->dtype)) ? cpu::activation_type(t.src[0]->dtype) : DType::F32;
  };
  // Prefill products on AMX tiles (amx_product.h): x packed into bf16
  // tiles, its own shadow.
  const bool amx = amx_on();
  auto takes_amx = [&](const Tensor& t) {
    if (!amx || t.op != Op::MulMat || t.n_rows() < cpu::kAmxMinTokens) return false;
    const Tensor& w = *t.src[0];
    return w.data && w.op == Op::Leaf && w.ne[2] * w.ne[3] == 1 && w.dtype != DType::F32 &&
           t.src[1]->dtype == DType::F32 && cpu::amx_product_fits(w.dtype, w.ne[0]);
  };
  auto rounds = [&](const Tensor& t) {
    return ((t.op == Op::MulMat || t.op == Op::MulMatId) && opts_.llama_rounding &&
            cpu::activation_type(t.src[0]->dtype) != DType::F32) ||
           takes_amx(t);
  };
  using ShadowKey = std::tuple<const Tensor*, DType, bool>;  // x, its type, AMX tiles
  std::map<ShadowKey, size_t> shadow_of;  // -> index in `extra` and `shadow_x`
  std::vector<ExtraBuffer> extra;
  std::vector<Tensor*> shadow_x;
  for (Tensor& t : tensors) {
    if (t.op == Op::Leaf || t.op == Op::View) continue;
    const size_t i = plan->nodes.size();
    plan->nodes.push_back(&t);
    plan->rounded.push_back(nullptr);
    plan->round_here.push_back(false);
    plan->repacked.push_back(nullptr);
    plan->amx.push_back(false);
    if (t.op == Op::SetRows || !rounds(t)) continue;
    const bool tiles = plan->amx.back() = takes_amx(t);
    if (t.op == Op::MulMat && !tiles && shadow_type(t) != DType::F32) plan->repacked.back() = repacked_for(*t.src[0]);
    const ShadowKey key{t.src[1], tiles ? DType::BF16 : shadow_type(t), tiles};
    auto it = shadow_of.find(key);
    if (it == shadow_of.end()) {
      Tensor& x = plan->shadows.emplace_back();
      x.dtype = std::get<1>(key);
      x.ne[0] = t.src[1]->ne[0];
      x.ne[1] = t.src[1]->n_rows();
      if (tiles) x.ne[1] = (x.ne[1] + cpu::kAmxTokenPad - 1) / cpu::kAmxTokenPad * cpu::kAmxTokenPad;
      set_contiguous_strides(x);
      x.name = t.src[1]->name + (tiles ? " (bf16 tiles)" : x.dtype != DType::F32 ? " (quantized)" : " (rounded)");
      it = shadow_of.emplace(key, extra.size()).first;
      extra.push_back({i, i, x.n_bytes()});
      shadow_x.push_back(&x);
      plan->round_here.back() = true;
    }
    extra[it->second].last = i;
    Tensor& node = plan->shadows.emplace_back(t);
    node.src[1] = shadow_x[it->second];
    plan->rounded.back() = &node;
  }
  // Each node its own launch: a tensor is freed after its last reader.
  std::vector<size_t> launch_end(plan->nodes.size());
  for (size_t i = 0; i < launch_end.size(); ++i) launch_end[i] = i;
  const ActivationPlan act = plan_activations(g, plan->nodes, launch_end, extra);
  const std::vector<size_t>& offset = act.offset;
  plan->bytes = act.bytes;
  void* mem = nullptr;
  if (plan->bytes > 0 && posix_memalign(&mem, kArenaAlign, plan->bytes) != 0)
    throw Error("cpu backend: cannot allocate " + std::to_string(plan->bytes) + " bytes of activations");
  plan->arena.reset(mem);
  if (mem) owned_.add(mem, plan->bytes);
  char* base = static_cast<char*>(mem);
  for (size_t k = 0; k < shadow_x.size(); ++k) shadow_x[k]->data = base + act.extra_offset[k];
  for (Tensor& t : tensors) {
    if (t.op == Op::View || t.op == Op::SetRows) {
      t.data = static_cast<char*>(t.view_src->data) + t.view_offset;
    } else if (t.op != Op::Leaf || t.data == nullptr) {
      t.data = base + offset[size_t(t.id)];
    }
  }
  for (size_t i = 0; i < plan->nodes.size(); ++i)
    if (plan->rounded[i]) plan->rounded[i]->data = plan->nodes[i]->data;
  plan_node_barriers(*plan);
  plan_segments(*plan);
  plans_[&g] = std::move(plan);
}

void CpuBackend::run_graph(Graph& g) {
  auto it = plans_.find(&g);
  if (it == plans_.end()) throw Error("cpu backend: graph run before plan()");
  const std::vector<Tensor*>& nodes = it->second->nodes;
  const std::vector<Tensor*>& rounded = it->second->rounded;
  const Plan& p = *it->second;
  static thread_local cpu::Scratch scratch_tl;
  std::exception_ptr error;
  std::mutex error_mutex;
  size_t begin = 0, end = 0;  // the nodes of the current job
  const auto job = [&](int ith) {
    cpu::OpContext ctx{ith, pool_.size(), &scratch_tl, !opts_.llama_rounding, pool_.chunk_cursor(ith),
                       numa_.groups.size() > 1 ? &numa_ : nullptr};
    for (size_t i = begin; i < end; ++i) {
      Tensor* t = nodes[i];
      const size_t first = i;
      std::chrono::steady_clock::time_point t0;
      if (profile_) {
        pool_.sync(ith);
        if (ith == 0) t0 = std::chrono::steady_clock::now();
      }
      struct Timed {  // ends node first's time when the node is done
        CpuBackend* b;
        int ith;
        size_t first;
        const Plan& p;
        const std::chrono::steady_clock::time_point& t0;
        ~Timed() {
          if (!b->profile_) return;
          b->pool_.sync(ith);
          if (ith == 0)
            b->profile_->add(*p.nodes[first], p.amx[first] ? " amx" : p.repacked[first] ? "x8" : "",
                             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
      } timed{this, ith, first, p, t0};
      if (Tensor* r = rounded[i]; r && !p.round_here[i]) {
        t = r;  // x made by an earlier node
      } else if (r) {  // round the rows of x
        if (p.barrier_round[i]) pool_.sync(ith);
        const Tensor& x = *t->src[1];
        const Tensor& xr = *r->src[1];
        cpu::for_each_row_chunk(ctx, x.n_rows(), x.ne[0], [&](int64_t r0, int64_t r1) {
          for (int64_t row = r0; row < r1; ++row) {
            if (p.amx[i])
              cpu::amx_pack_token(cpu::flat_row<const float>(x, row), x.ne[0], row, static_cast<uint16_t*>(xr.data));
            else if (xr.dtype == DType::F32)
              cpu::round_activations(t->src[0]->dtype, cpu::flat_row<const float>(x, row),
                                     xr.row_ptr<float>(row), x.ne[0]);
            else
              cpu::quantize_act(xr.dtype, cpu::flat_row<const float>(x, row), xr.row_ptr<void>(row), x.ne[0]);
          }
        });
        t = r;
      }
      // Every thread reaches every sync point, even after an error; the
      // job's end joins the threads after the last node.
      if (p.barrier_node[i]) pool_.sync(ith);
      try {
        if (p.fuse_next[i]) {
          cpu::op_rms_norm_mul(*t, *nodes[++i], ctx);
          continue;
        }
        switch (t->op) {
          case Op::GetRows: cpu::op_get_rows(*t, ctx); break;
          case Op::MulMat:
            if (p.amx[i]) cpu::op_mul_mat_amx(*t, ctx);
            else if (p.repacked[i]) cpu::op_mul_mat_repacked(*t, *p.repacked[i], ctx);
            else cpu::op_mul_mat(*t, ctx);
            break;
          case Op::RmsNorm: cpu::op_rms_norm(*t, ctx); break;
          case Op::LayerNorm: cpu::op_layer_norm(*t, ctx); break;
          case Op::Gelu: cpu::op_gelu(*t, ctx); break;
          case Op::Mul: cpu::op_mul(*t, ctx); break;
          case Op::Add: cpu::op_add(*t, ctx); break;
          case Op::Scale: cpu::op_scale(*t, ctx); break;
          case Op::Softcap: cpu::op_softcap(*t, ctx); break;
          case Op::Rope: cpu::op_rope(*t, ctx); break;
          case Op::GeluMul: cpu::op_gelu_mul(*t, ctx); break;
          case Op::SiluMul: cpu::op_silu_mul(*t, ctx); break;
          case Op::SwigluOai: cpu::op_swiglu_oai(*t, ctx); break;
          case Op::Attention: cpu::op_attention(*t, ctx); break;
          case Op::SetRows: cpu::op_set_rows(*t, ctx); break;
          case Op::Sample: cpu::op_sample(*t, ctx); break;
          case Op::AllowTokens: cpu::op_allow_tokens(*t, ctx); break;
          case Op::AllReduce: cpu::op_all_reduce(*t, ctx); break;
          case Op::AllGather: cpu::op_all_gather(*t, ctx); break;
          case Op::TopK: cpu::op_top_k(*t, ctx); break;
          case Op::MoeWeights: cpu::op_moe_weights(*t, ctx); break;
          case Op::MulMatId: cpu::op_mul_mat_id(*t, ctx); break;
          case Op::MoeSum: cpu::op_moe_sum(*t, ctx); break;
          default: throw Error(std::string("cpu backend: no kernel for op ") + op_name(t->op));
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  };
  // One job for the whole graph, or one per segment with the stop flag
  // looked at between them (each job's end joins all threads, so a cut is
  // a barrier).
  for (size_t k = 0; k <= p.segment_starts.size() && !error; ++k) {
    end = k < p.segment_starts.size() ? p.segment_starts[k] : nodes.size();
    if (opts_.stop && opts_.stop->load(std::memory_order_relaxed)) {
      error = std::make_exception_ptr(Cancelled("interrupted"));
      break;
    }
    pool_.run(job);
    begin = end;
  }
  ++stats_.graphs_run;
  if (error) std::rethrow_exception(error);
}

}  // namespace weir
