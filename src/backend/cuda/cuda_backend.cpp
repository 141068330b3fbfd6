#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "backend/activation_plan.h"
#include "backend/memory_ranges.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/pdl.h"
#include "core/error.h"
#include "core/graph.h"

namespace weir::cuda {
namespace {

constexpr size_t kCublasWorkspace = size_t(32) << 20;

// Device memory from alloc(): zero-filled, and known to the backend as its
// own while it lives, so plan() uses it in place instead of copying it.
// Everything that writes device memory goes on the backend's stream: it is
// a non-blocking stream, not ordered after work on the legacy default
// stream (a cudaMemset there could land after our kernels' writes, a
// cudaMemcpy from pageable memory returns before its DMA is done).
class DeviceBuffer final : public Buffer {
 public:
  DeviceBuffer(size_t n, MemoryRanges* owned, cudaStream_t stream) : owned_(owned) {
    const cudaError_t e = cudaMalloc(&data_, n ? n : 1);
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw Error("cuda backend: cannot allocate " + std::to_string(n) + " bytes of device memory (" +
                  cudaGetErrorString(e) + ")");
    }
    WEIR_CUDA_CHECK(cudaMemsetAsync(data_, 0, n ? n : 1, stream));
    size_ = n;
    owned_->add(data_, n);
  }
  ~DeviceBuffer() override {
    owned_->erase(data_);
    cudaFree(data_);
  }

 private:
  MemoryRanges* owned_;
};

// Pinned host memory: the device copies to and from it asynchronously.
class PinnedBuffer final : public Buffer {
 public:
  explicit PinnedBuffer(size_t n) {
    WEIR_CUDA_CHECK(cudaMallocHost(&data_, n ? n : 1));
    std::memset(data_, 0, n);
    size_ = n;
  }
  ~PinnedBuffer() override { cudaFreeHost(data_); }
};

class CudaEvent final : public Event {
 public:
  CudaEvent(cudaStream_t s, BackendStats& stats) : stats_(stats) {
    WEIR_CUDA_CHECK(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming));
    WEIR_CUDA_CHECK(cudaEventRecord(e_, s));
  }
  ~CudaEvent() override { cudaEventDestroy(e_); }
  void wait() override {
    ++stats_.host_waits;
    WEIR_CUDA_CHECK(cudaEventSynchronize(e_));
  }
  bool is_done() const override { return cudaEventQuery(e_) == cudaSuccess; }
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
  BackendStats& stats_;
};

}  // namespace

// A queue on one of the backend's streams: the compute stream, or the copy
// stream (copies only).
class CudaQueue final : public Queue {
 public:
  CudaQueue(CudaBackend& b, cudaStream_t s, bool compute) : b_(b), s_(s), compute_(compute) {}
  void run(Graph& g) override {
    if (!compute_) throw Error("cuda backend: graphs run on the compute queue, not the copy queue");
    b_.run_graph(g);
  }
  void copy_to_device(void* dst, const void* src, size_t n) override {
    WEIR_CUDA_CHECK(cudaSetDevice(b_.device_));
    WEIR_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s_));
  }
  void copy_to_host(void* dst, const void* src, size_t n) override {
    WEIR_CUDA_CHECK(cudaSetDevice(b_.device_));
    WEIR_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s_));
  }
  // Device to device, this GPU's memory or a peer's (unified addressing).
  void copy_on_device(void* dst, const void* src, size_t n) override {
    WEIR_CUDA_CHECK(cudaSetDevice(b_.device_));
    WEIR_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s_));
  }
  std::unique_ptr<Event> record() override {
    WEIR_CUDA_CHECK(cudaSetDevice(b_.device_));
    return std::make_unique<CudaEvent>(s_, b_.stats_);
  }
  // A CUDA event of any GPU: on the device; an inline queue's: nothing to
  // wait for; any other: on the host (counted by that event).
  void wait_event(Event& e) override {
    if (auto* ce = dynamic_cast<CudaEvent*>(&e)) {
      WEIR_CUDA_CHECK(cudaSetDevice(b_.device_));
      WEIR_CUDA_CHECK(cudaStreamWaitEvent(s_, ce->get(), 0));
    } else if (!e.is_host_event()) {
      e.wait();
    }
  }
  void synchronize() override {
    ++b_.stats_.host_waits;
    WEIR_CUDA_CHECK(cudaStreamSynchronize(s_));
  }

 private:
  CudaBackend& b_;
  cudaStream_t s_;
  bool compute_;
};

struct CudaBackend::Plan {
  void* arena = nullptr;
  size_t bytes = 0;
  std::vector<Tensor*> nodes;
  std::vector<size_t> scratch;  // per node
  // Nodes run fused with node i: 1 (rms_norm i, mul i + 1) or 2 (add i,
  // rms_norm i + 1, mul i + 2); 0 for the rest.
  std::vector<int> fused;
  std::vector<bool> x_quantized;   // mul_mat node i reuses the 8-bit x already in scratch
  std::vector<bool> quantize_out;  // the launch at node i writes its result as 8-bit x for the next
  std::vector<bool> w_fixed;       // mul_mat (group) at node i: no kernel writes its weights; attention: its mask
  // Ropes and set_rows launched together from node i (op_rope_store): the
  // nodes [i, i + rope_store[i]) (0: not such a launch); a rope whose only
  // reader is a set_rows writes into its cache (rope_into: that node), and
  // the set_rows is skipped.
  std::vector<int> rope_store;
  std::vector<int> rope_into;
  std::vector<bool> skip;
  // A product at node i that runs with the add, norm and mul after it,
  // the norm folded into it and into the products of the next launch
  // (mul_mat_q8.h): those have fold_from = i.
  std::vector<bool> fold;
  std::vector<int> fold_from;
  // Products at node i whose results go to the rope_store launch after
  // them, run by the products' own launch (OpCtx::row_jobs): the jobs, one
  // a product; the product launch nearest to the rope_store launch spans it
  // (jobs_end: the end of its nodes). Every launch that takes some of its
  // jobs is planned as one with it for memory (mem_end, from node i: it
  // writes results of nodes that come later).
  std::vector<std::vector<RopeStoreNode>> row_jobs;
  std::vector<size_t> jobs_end;
  std::vector<size_t> mem_end;
  // gate/up products at node i (a group of 2) that apply the GLU at i + 2
  // in their launch and hand it to the product launch after as 8-bit
  // blocks (op_mul_mat_glu); that launch has x_handed.
  std::vector<bool> glu;
  std::vector<bool> x_handed;
  // The nodes planned as one for memory from launch i: [i, unit_end(i)).
  size_t unit_end(size_t i) const { return std::max(i + span(i), mem_end[i]); }
  size_t span(size_t i) const {
    if (jobs_end[i]) return jobs_end[i] - i;
    return size_t(fold[i]             ? 4
                  : rope_store[i] > 0 ? rope_store[i]
                  : glu[i]            ? 3
                  : group[i] > 1      ? group[i]
                                      : 1 + fused[i]);
  }
  std::vector<int> group;            // products launched together from node i (1: alone)
  std::vector<const void*> weights;  // host addresses of the weights it holds
  cudaGraphExec_t exec = nullptr;
  uint64_t exec_generation = 0;
  int runs = 0;
  bool profiled = false;
  ~Plan() {
    if (exec) cudaGraphExecDestroy(exec);
    if (arena) cudaFree(arena);
  }
};

CudaBackend::CudaBackend(const CudaOptions& o) : opts_(o), device_(o.device) {
  if (const char* e = std::getenv("WEIR_CUDA_GRAPHS"); e && std::string(e) == "0") opts_.graphs = false;  // diagnostics
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error(std::string("cuda backend: no usable CUDA driver or device (") + cudaGetErrorString(e) + ")");
  }
  if (device_ < 0 || device_ >= n)
    throw Error("cuda backend: --device " + std::to_string(device_) + " does not exist (" + std::to_string(n) +
                " CUDA device" + (n == 1 ? "" : "s") + ")");
  WEIR_CUDA_CHECK(cudaSetDevice(device_));
  WEIR_CUDA_CHECK(cudaGetDeviceProperties(&prop_, device_));
  name_ = "CUDA";
  WEIR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  WEIR_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  WEIR_CUDA_CHECK(cublasCreate(&cublas_));
  WEIR_CUDA_CHECK(cublasSetStream(cublas_, stream_));
  // A workspace of our own, so that cuBLAS allocates nothing while a graph
  // is being recorded.
  WEIR_CUDA_CHECK(cudaMalloc(&cublas_workspace_, kCublasWorkspace));
  WEIR_CUDA_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspace));
  queue_ = std::make_unique<CudaQueue>(*this, stream_, true);
  copy_queue_ = std::make_unique<CudaQueue>(*this, copy_stream_, false);
  const char* prof = std::getenv("WEIR_CUDA_PROFILE");
  profile_ = prof && *prof && std::string(prof) != "0";
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  if (profile_) print_profile();
  if (stream_) cudaStreamSynchronize(stream_);
  if (copy_stream_) cudaStreamSynchronize(copy_stream_);
  plans_.clear();
  for (auto& [host, w] : weights_) cudaFree(w.dev);
  if (scratch_) cudaFree(scratch_);
  if (fold_) cudaFree(fold_);
  if (hand_) cudaFree(hand_);
  if (cublas_) cublasDestroy(cublas_);
  if (cublas_workspace_) cudaFree(cublas_workspace_);
  if (stream_) cudaStreamDestroy(stream_);
  if (copy_stream_) cudaStreamDestroy(copy_stream_);
  for (void* p : registered_) cudaHostUnregister(p);
}

Queue& CudaBackend::queue() { return *queue_; }
Queue& CudaBackend::copy_queue() { return *copy_queue_; }

bool CudaBackend::supports(const Tensor& t) const {
  switch (t.op) {
    case Op::MulMat:
    case Op::GetRows: return traits(t.src[0]->dtype).dequantizable;
    case Op::RmsNorm:
    case Op::Mul:
    case Op::Add:
    case Op::Scale:
    case Op::Rope:
    case Op::GeluMul:
    case Op::SiluMul:
    case Op::Attention:
    case Op::SetRows:
    case Op::Sample:
    case Op::View:
    case Op::Leaf: return true;
    default: return false;
  }
}

std::unique_ptr<Buffer> CudaBackend::alloc(size_t bytes) {
  return std::make_unique<DeviceBuffer>(bytes, &owned_, stream_);
}
std::unique_ptr<Buffer> CudaBackend::alloc_host(size_t bytes) { return std::make_unique<PinnedBuffer>(bytes); }

bool CudaBackend::register_host_memory(const void* p, size_t n) {
  WEIR_CUDA_CHECK(cudaSetDevice(device_));
  // Read only: the pages of a file mapping opened for reading.
  const cudaError_t e =
      cudaHostRegister(const_cast<void*>(p), n, cudaHostRegisterPortable | cudaHostRegisterReadOnly);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  registered_.push_back(const_cast<void*>(p));
  return true;
}

bool CudaBackend::owns(const void* p) const { return owned_.contains(p); }

void* CudaBackend::upload_weight(const Tensor& t) {
  const size_t n = t.n_bytes();
  auto it = weights_.find(t.data);
  if (it != weights_.end()) {
    if (it->second.bytes < n)
      throw Error("cuda backend: weight '" + t.name + "' is larger than the tensor already copied from its address");
    return it->second.dev;
  }
  void* d = nullptr;
  // 16 bytes of slack: kernels read 2-byte-aligned blocks as aligned words,
  // up to one word past a row's last block.
  const cudaError_t e = cudaMalloc(&d, n + 16);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error("cuda backend: out of device memory copying weight '" + t.name + "' (" + std::to_string(n) +
                " bytes; " + std::to_string(weight_bytes_ >> 20) + " MiB of weights already on the GPU)");
  }
  // On the stream (DeviceBuffer says why): kernels launched after it see it.
  WEIR_CUDA_CHECK(cudaMemcpyAsync(d, t.data, n, cudaMemcpyHostToDevice, stream_));
  WEIR_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(d) + n, 0, 16, stream_));
  owned_.add(d, n + 16);
  weight_bytes_ += n;
  weights_.emplace(t.data, Weight{d, n, 0});
  return d;
}

void CudaBackend::drop_plan(const Graph* g) {
  auto it = plans_.find(g);
  if (it == plans_.end()) return;
  cudaStreamSynchronize(stream_);  // its arena and weights may still be in use
  if (it->second->arena) owned_.erase(it->second->arena);
  for (const void* host : it->second->weights) {
    auto w = weights_.find(host);
    if (w == weights_.end() || --w->second.users > 0) continue;
    owned_.erase(w->second.dev);
    weight_bytes_ -= w->second.bytes;
    cudaFree(w->second.dev);
    weights_.erase(w);
  }
  plans_.erase(it);
}

void CudaBackend::ensure(void** mem, size_t* have, size_t bytes) {
  if (bytes <= *have) return;
  WEIR_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (*mem) cudaFree(*mem);
  *mem = nullptr;
  *have = 0;
  WEIR_CUDA_CHECK(cudaMalloc(mem, bytes));
  *have = bytes;
  ++scratch_generation_;  // graphs recorded with the old memory must be recorded again
}

namespace {

// Whether the environment variable `name` is "0" (a planner knob turned off).
bool env_is_zero(const char* name) {
  const char* e = std::getenv(name);
  return e && std::string(e) == "0";
}

size_t scratch_for(const Tensor& t) {
  switch (t.op) {
    case Op::MulMat: return mul_mat_scratch_bytes(t);
    case Op::Attention: return attention_scratch_bytes(t);
    case Op::Sample: return sample_scratch_bytes(t);
    default: return 0;
  }
}

}  // namespace

void CudaBackend::plan(Graph& g) {
  WEIR_CUDA_CHECK(cudaSetDevice(device_));
  drop_plan(&g);  // planned again: the old plan goes
  auto& tensors = g.tensors();
  // Weights (leaves with host data) to device memory; leaves already in our
  // memory (the KV cache) are used in place.
  std::vector<const void*> held;
  for (Tensor& t : tensors)
    if (t.op == Op::Leaf && t.data && !owns(t.data)) {
      const void* host = t.data;
      t.data = upload_weight(t);
      if (std::find(held.begin(), held.end(), host) == held.end()) {
        held.push_back(host);
        ++weights_[host].users;
      }
    }

  auto plan = std::make_unique<Plan>();
  plan->weights = std::move(held);
  size_t scratch = 0;
  for (Tensor& t : tensors) {
    if (t.op == Op::Leaf || t.op == Op::View) continue;
    plan->nodes.push_back(&t);
    scratch = std::max(scratch, scratch_for(t));
  }
  for (Tensor* t : plan->nodes) plan->scratch.push_back(scratch_for(*t));
  plan_fusion(*plan, g);

  // Activation memory (backend/activation_plan.h says why by launch).
  const size_t nn = plan->nodes.size();
  std::vector<size_t> launch_end(nn);
  for (size_t i = 0; i < nn; i += plan->span(i))
    for (size_t k = i; k < std::min(nn, i + plan->span(i)); ++k) launch_end[k] = std::min(nn, plan->unit_end(i)) - 1;
  const ActivationPlan act = plan_activations(g, plan->nodes, launch_end);
  const std::vector<size_t>& offset = act.offset;
  plan->bytes = act.bytes;
  if (plan->bytes) {
    const cudaError_t e = cudaMalloc(&plan->arena, plan->bytes);
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw Error("cuda backend: cannot allocate " + std::to_string(plan->bytes >> 20) +
                  " MiB of device memory for a graph's activations");
    }
    WEIR_CUDA_CHECK(cudaMemsetAsync(plan->arena, 0, plan->bytes, stream_));
    owned_.add(plan->arena, plan->bytes);
  }
  char* base = static_cast<char*>(plan->arena);
  for (Tensor& t : tensors) {
    if (t.op == Op::View || t.op == Op::SetRows)
      t.data = static_cast<char*>(t.view_src->data) + t.view_offset;
    else if (t.op != Op::Leaf || t.data == nullptr)
      t.data = base + offset[size_t(t.id)];
  }
  check_launch_memory(*plan);
  if (const char* e = std::getenv("WEIR_CUDA_PLAN_DUMP"); e && *e == '1')  // the launches (diagnostics)
    for (size_t i = 0; i < plan->nodes.size(); i += plan->span(i))
      if (!plan->skip[i]) std::fprintf(stderr, "plan %4zu: %s\n", i, launch_label(*plan, i).c_str());

  ensure(&scratch_, &scratch_bytes_, std::max<size_t>(scratch, 256));
  size_t fold = 0;
  for (size_t i = 0; i < plan->nodes.size(); ++i)
    if (plan->fold[i]) fold = std::max(fold, fold_norm_bytes(*plan->nodes[i]));
  if (fold) ensure(&fold_, &fold_bytes_, fold);
  size_t hand = 0;
  for (size_t i = 0; i < plan->nodes.size(); ++i)
    if (plan->glu[i] && mul_mat_quantizes_x(*plan->nodes[i]))
      hand = std::max(hand, glu_hand_bytes(*plan->nodes[i + 2]));
  if (hand) ensure(&hand_, &hand_bytes_, hand);
  stats_.planned_launches = 0;
  for (size_t i = 0; i < plan->nodes.size(); i += plan->span(i))
    if (!plan->skip[i]) ++stats_.planned_launches;
  plans_[&g] = std::move(plan);
}

void CudaBackend::release(const Graph& g) { drop_plan(&g); }

// The planner's promise, checked on every plan: no node of a launch writes
// memory that an input from outside the launch occupies (the blocks of a
// launch run in no set order, so such an overlap is a race).
void CudaBackend::check_launch_memory(const Plan& p) {
  const size_t nn = p.nodes.size();
  const auto overlap = [](const Tensor* a, const Tensor* b) {
    const auto* x = static_cast<const char*>(a->data);
    const auto* y = static_cast<const char*>(b->data);
    return x && y && x < y + b->n_bytes() && y < x + a->n_bytes();
  };
  for (size_t i = 0; i < nn; i += p.span(i)) {
    const size_t end = std::min(nn, p.unit_end(i));
    const auto inside = [&](const Tensor* t) {
      for (size_t k = i; k < end; ++k)
        if (p.nodes[k] == t) return true;
      return false;
    };
    for (size_t k = i; k < end; ++k) {
      const Tensor* out = p.nodes[k];
      if (out->op == Op::SetRows) continue;  // writes its table, which no member reads
      for (size_t j = i; j < end; ++j)
        for (const Tensor* s : p.nodes[j]->src)
          if (s && !inside(s->storage()) && s->storage()->op != Op::Leaf && overlap(out, s->storage()))
            throw Error("cuda backend: the launch at node " + std::to_string(i) + " (" + launch_label(p, i) +
                        ") writes " + out->name + " over its input " + s->storage()->name);
    }
  }
}

// Kernels that can run as one: an rms_norm whose only reader is the mul
// right after it (by a row of weights), together with the add right before
// it when the norm reads that add (the residual stream's pattern); products
// on the same x, one after
// the other with no other user of scratch between them, quantize x once.
void CudaBackend::plan_fusion(Plan& p, const Graph& g) const {
  const size_t n = p.nodes.size();
  std::vector<int> readers(g.tensors().size(), 0);  // views count as readers
  for (const Tensor& t : g.tensors())
    for (const Tensor* s : t.src)
      if (s) ++readers[size_t(s->id)];
  for (const Tensor* o : g.outputs()) ++readers[size_t(o->id)];
  p.fused.assign(n, 0);
  p.fold.assign(n, false);
  p.fold_from.assign(n, -1);
  p.row_jobs.assign(n, {});
  p.jobs_end.assign(n, 0);
  p.mem_end.assign(n, 0);
  p.glu.assign(n, false);
  p.x_handed.assign(n, false);
  const auto only_reader_is_next = [&](size_t i) { return readers[size_t(p.nodes[i]->id)] == 1; };
  for (size_t i = 0; i + 1 < n; ++i) {
    if (i + 2 < n && only_reader_is_next(i + 1) &&
        can_fuse_add_rms_norm_mul(*p.nodes[i], *p.nodes[i + 1], *p.nodes[i + 2])) {
      p.fused[i] = 2;
      i += 2;
    } else if (only_reader_is_next(i) && can_fuse_rms_norm_mul(*p.nodes[i], *p.nodes[i + 1])) {
      p.fused[i] = 1;
      i += 1;
    }
  }
  // Consecutive products on the same x, one launch (q, k, v; gate, up).
  p.group.assign(n, 1);
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && int(j - i) < mul_mat_max_group() && p.nodes[i]->op == Op::MulMat && p.nodes[j]->op == Op::MulMat &&
           can_group_mul_mat(*p.nodes[i], *p.nodes[j]))
      ++j;
    p.group[i] = int(j - i);
    i = j;
  }
  plan_rope_store(p, readers);
  // Products whose weights no kernel of the graph writes: leaves that no
  // set_rows targets (the KV cache is a leaf too).
  std::vector<bool> written(g.tensors().size(), false);
  for (const Tensor* t : p.nodes)
    if (t->op == Op::SetRows) written[size_t(t->src[0]->storage()->id)] = true;
  p.w_fixed.assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    if (p.nodes[i]->op == Op::Attention) {  // its mask (a graph input)
      const Tensor* m = p.nodes[i]->src[3] ? p.nodes[i]->src[3]->storage() : nullptr;
      p.w_fixed[i] = m && m->op == Op::Leaf && m->id >= 0 && !written[size_t(m->id)];
      continue;
    }
    bool fixed = p.nodes[i]->op == Op::MulMat;
    for (size_t k = i; fixed && k < i + size_t(p.group[i]); ++k) {
      const Tensor* w = p.nodes[k]->src[0]->storage();
      fixed = w->op == Op::Leaf && w->id >= 0 && !written[size_t(w->id)];
    }
    p.w_fixed[i] = fixed;
  }
  // A norm or GLU whose result the next launch, a product, quantizes: the
  // norm or GLU writes the 8-bit blocks itself.
  p.quantize_out.assign(n, false);
  for (size_t i = 0; i < n;) {
    while (i < n && p.skip[i]) ++i;
    if (i >= n) break;
    size_t next = i + p.span(i);
    while (next < n && p.skip[next]) ++next;
    const Tensor& out = *p.nodes[i + size_t(p.fused[i])];
    const bool producer = p.fused[i] > 0 || out.op == Op::SiluMul || out.op == Op::GeluMul || out.op == Op::RmsNorm ||
                          out.op == Op::Attention;
    if (producer && next < n && p.nodes[next]->op == Op::MulMat && can_quantize_for(out, *p.nodes[next]))
      p.quantize_out[i] = true;
    i = next;
  }
  p.x_quantized.assign(n, false);
  const Tensor* last_x = nullptr;  // x whose 8-bit blocks scratch holds
  for (size_t i = 0; i < n; ++i) {
    const Tensor& t = *p.nodes[i];
    if (p.quantize_out[i]) {
      last_x = p.nodes[i + size_t(p.fused[i])];
      i += size_t(p.fused[i]);
    } else if (t.op == Op::MulMat && mul_mat_quantizes_x(t)) {
      p.x_quantized[i] = last_x == t.src[1];
      last_x = t.src[1];
    } else if (p.scratch[i] > 0) {
      last_x = nullptr;  // scratch overwritten
    }
  }
  plan_norm_folds(p, readers);
  plan_row_jobs(p, readers);
  plan_glu(p, readers);
}

// gate/up products read only by a GLU that the next product launch alone
// reads, as 8-bit blocks: the GLU runs in the products' launch. With the
// float decode kernel (F16, ...), gate/up read only by a GLU: the launch
// writes the GLU's result.
void CudaBackend::plan_glu(Plan& p, const std::vector<int>& readers) const {
  static const bool on = !env_is_zero("WEIR_CUDA_GLU_FUSE");  // =0: a GLU kernel instead (for comparisons)
  const size_t n = p.nodes.size();
  for (size_t i = 0; on && i + 3 < n; ++i) {
    if (p.skip[i] || p.group[i] != 2 || p.fold[i] || !p.row_jobs[i].empty() || p.x_handed[i]) continue;
    const Tensor& a = *p.nodes[i];
    const Tensor& b = *p.nodes[i + 1];
    const Tensor& glu = *p.nodes[i + 2];
    if (readers[size_t(a.id)] != 1 || readers[size_t(b.id)] != 1 || p.fused[i + 2]) continue;
    if (!p.quantize_out[i + 2] && can_fuse_vec_glu(a, b, glu)) {
      p.glu[i] = true;
      i += 2;
      continue;
    }
    if (readers[size_t(glu.id)] != 1 || !p.quantize_out[i + 2] || !can_fuse_glu(a, b, glu)) continue;
    size_t next = i + 3;
    while (next < n && p.skip[next]) ++next;
    if (next >= n || p.nodes[next]->op != Op::MulMat || p.nodes[next]->src[1] != &glu || !p.x_quantized[next] ||
        p.group[next] != 1 || p.fold_from[next] >= 0)
      continue;
    p.glu[i] = true;
    p.x_handed[next] = true;
    i += 2;
  }
}

// A product whose only reader is an add + rms_norm + mul launch (the
// residual stream), which hands mul's result to the next launch's products
// alone: the three run in the product's launch, and the next launch reads
// the fold (mul_mat_q8.h). Not where the product itself reads a fold.
void CudaBackend::plan_norm_folds(Plan& p, const std::vector<int>& readers) const {
  static const bool on = !env_is_zero("WEIR_CUDA_NORM_FOLD");  // =0: a norm kernel instead (for comparisons)
  const size_t n = p.nodes.size();
  for (size_t i = 0; on && i + 4 < n; ++i) {
    if (p.skip[i] || p.group[i] != 1 || p.fold_from[i] >= 0 || p.fused[i + 1] != 2) continue;
    const Tensor& prod = *p.nodes[i];
    const Tensor& mul = *p.nodes[i + 3];
    // The 8-bit kernels' fold replaces the norm's 8-bit blocks; the float
    // kernel's writes mul's result.
    const bool q8 = mul_mat_quantizes_x(prod);
    if ((q8 && !p.quantize_out[i + 1]) || readers[size_t(prod.id)] != 1 ||
        !can_fold_norm(prod, *p.nodes[i + 1], *p.nodes[i + 2], mul))
      continue;
    // The product launches after it that read mul's result (q/k, then v
    // where v has a type of its own), together every reader of it.
    std::vector<size_t> takers;
    int taken = 0;
    for (size_t next = i + 4; next < n && taken < readers[size_t(mul.id)];) {
      while (next < n && p.skip[next]) ++next;
      if (next >= n || p.nodes[next]->op != Op::MulMat || p.nodes[next]->src[1] != &mul ||
          (q8 && !p.x_quantized[next]))
        break;
      bool takes = true;
      for (size_t k = next; k < next + size_t(p.group[next]); ++k) takes = takes && mul_mat_takes_fold(prod, *p.nodes[k]);
      if (!takes) break;
      takers.push_back(next);
      taken += p.group[next];
      next += size_t(p.group[next]);
    }
    if (takers.empty() || taken != readers[size_t(mul.id)]) continue;
    p.fold[i] = true;
    for (size_t t : takers) p.fold_from[t] = int(i);
    i += 3;
  }
}

// A rope_store launch whose jobs read the results of the product launches
// right before it, and nothing else reads those (q, k, v -> rope q, rope k
// into the cache, v into its cache; in Q4_K_M files v often has a type of
// its own, a launch of its own): the product launches run the jobs on their
// results, and no rope_store launch runs.
void CudaBackend::plan_row_jobs(Plan& p, const std::vector<int>& readers) const {
  static const bool on = !env_is_zero("WEIR_CUDA_ROW_JOBS");  // =0: a rope_store launch instead (for comparisons)
  const size_t n = p.nodes.size();
  std::vector<size_t> starts;  // the launches, in order
  for (size_t i = 0; i < n; i += p.span(i))
    if (!p.skip[i]) starts.push_back(i);
  for (size_t s = 0; on && s < starts.size(); ++s) {
    const size_t j = starts[s];
    if (p.rope_store[j] <= 0) continue;
    std::vector<RopeStoreNode> jobs;
    std::vector<const Tensor*> reads;  // the product each job reads
    bool ok = true;
    for (size_t k = j; ok && k < j + size_t(p.rope_store[j]); ++k) {
      if (p.skip[k]) continue;
      const Tensor& t = *p.nodes[k];
      const Tensor* src = t.op == Op::Rope ? t.src[0] : t.src[1];
      ok = src && readers[size_t(src->storage()->id)] == 1 && (src == src->storage() || readers[size_t(src->id)] == 1);
      jobs.push_back({&t, p.rope_into[k] >= 0 ? p.nodes[size_t(p.rope_into[k])] : nullptr});
      reads.push_back(ok ? src->storage() : nullptr);
    }
    // The product launches before it, nearest first, until every job has one.
    std::vector<size_t> takers;
    std::vector<std::vector<RopeStoreNode>> taken;
    size_t assigned = 0;
    for (size_t b = s; ok && assigned < jobs.size() && b-- > 0;) {
      const size_t i = starts[b];
      if (p.nodes[i]->op != Op::MulMat || p.fold[i] || !p.row_jobs[i].empty()) {
        ok = false;
        break;
      }
      std::vector<RopeStoreNode> mine;
      for (size_t m = 0; ok && m < size_t(p.group[i]); ++m) {
        size_t q = 0;
        while (q < jobs.size() && reads[q] != p.nodes[i + m]) ++q;
        ok = q < jobs.size();
        if (ok) mine.push_back(jobs[q]), ++assigned;
      }
      ok = ok && can_run_row_jobs(&p.nodes[i], p.group[i], mine.data());
      takers.push_back(i);
      taken.push_back(std::move(mine));
    }
    if (!ok || assigned != jobs.size()) continue;
    const size_t end = j + size_t(p.rope_store[j]);
    for (size_t k = 0; k < takers.size(); ++k) {
      p.row_jobs[takers[k]] = std::move(taken[k]);
      p.mem_end[takers[k]] = end;
    }
    p.jobs_end[takers[0]] = end;
  }
}

// The KV-cache writes of an attention block: a rope whose only reader is a
// set_rows (through a reshape) writes into the cache itself, moved to the
// rope's place when nothing in between touches the cache; then consecutive
// ropes and set_rows that do not read each other's results run as one
// launch.
void CudaBackend::plan_rope_store(Plan& p, const std::vector<int>& readers) const {
  const size_t n = p.nodes.size();
  p.rope_store.assign(n, 0);
  p.rope_into.assign(n, -1);
  p.skip.assign(n, false);
  const auto reads = [](const Tensor& t, const Tensor* storage) {
    for (const Tensor* s : t.src)
      if (s && s->storage() == storage) return true;
    return false;
  };
  for (size_t r = 0; r < n; ++r) {
    const Tensor& rope = *p.nodes[r];
    if (rope.op != Op::Rope || readers[size_t(rope.id)] != 1 || !can_rope_store(rope)) continue;
    for (size_t j = r + 1; j < n; ++j) {
      const Tensor& t = *p.nodes[j];
      if (t.op == Op::SetRows && t.src[1] && t.src[1]->storage() == &rope) {
        if (can_rope_into(rope, t) && (t.src[1] == &rope || readers[size_t(t.src[1]->id)] == 1)) {
          const Tensor* table = t.src[0]->storage();
          bool clear = true;
          for (size_t m = r + 1; m < j && clear; ++m)
            clear = !reads(*p.nodes[m], table) &&
                    !(p.nodes[m]->op == Op::SetRows && p.nodes[m]->src[0]->storage() == table);
          if (clear) {
            p.rope_into[r] = int(j);
            p.skip[j] = true;
          }
        }
        break;
      }
      if (reads(t, &rope)) break;
    }
  }
  // What a launch member writes: a rope its result (or, written into a
  // cache, the cache too), a set_rows its table.
  const auto writes = [&](size_t i) {
    const Tensor& t = *p.nodes[i];
    return t.op == Op::SetRows ? t.src[0]->storage() : static_cast<const Tensor*>(&t);
  };
  for (size_t i = 0; i < n; ++i) {
    if (p.skip[i] || !can_rope_store(*p.nodes[i]) || p.fused[i] || p.group[i] > 1) continue;
    std::vector<const Tensor*> written = {writes(i)};
    if (p.rope_into[i] >= 0) written.push_back(writes(size_t(p.rope_into[i])));
    int jobs = 1;
    size_t j = i + 1;
    for (; j < n && jobs < rope_store_max_jobs(); ++j) {
      if (p.skip[j]) continue;
      const Tensor& t = *p.nodes[j];
      if (!can_rope_store(t)) break;
      bool independent = true;
      for (const Tensor* w : written) independent = independent && !reads(t, w) && writes(j) != w;
      if (!independent) break;
      written.push_back(writes(j));
      if (p.rope_into[j] >= 0) written.push_back(writes(size_t(p.rope_into[j])));
      ++jobs;
    }
    if (jobs > 1 || p.rope_into[i] >= 0) {
      p.rope_store[i] = int(j - i);
      i = j - 1;
    }
  }
}

size_t CudaBackend::planned_bytes(const Graph& g) const {
  auto it = plans_.find(&g);
  return it == plans_.end() ? 0 : it->second->bytes;
}

// Launches nodes [begin, end); a fused pair starting before end runs whole.
void CudaBackend::launch_nodes(Plan& p, size_t begin, size_t end) {
  OpCtx c;
  c.stream = stream_;
  c.cublas = cublas_;
  c.scratch = scratch_;
  c.scratch_bytes = scratch_bytes_;
  c.sm_count = prop_.multiProcessorCount;
  c.fold = fold_;
  c.fold_bytes = fold_bytes_;
  c.hand = hand_;
  c.hand_bytes = hand_bytes_;
  for (size_t i = begin; i < std::min(end, p.nodes.size()); ++i) {
    Tensor* t = p.nodes[i];
    if (p.skip[i]) continue;  // done by the rope before it
    t_pdl_off = pdl_off_for(t->op) || pdl_off_for_node(i);
    if (p.rope_store[i] > 0) {
      RopeStoreNode jobs[8];
      int nj = 0;
      for (size_t k = i; k < i + size_t(p.rope_store[i]); ++k)
        if (!p.skip[k]) jobs[nj++] = {p.nodes[k], p.rope_into[k] >= 0 ? p.nodes[size_t(p.rope_into[k])] : nullptr};
      op_rope_store(jobs, nj, c);
      i += size_t(p.rope_store[i] - 1);
      continue;
    }
    c.quantize_out = p.quantize_out[i];
    c.x_quantized = p.x_quantized[i];
    c.w_fixed = p.w_fixed[i];
    c.x_folded = p.fold_from[i] >= 0;
    c.x_handed = p.x_handed[i];
    c.fold_eps = c.x_folded ? p.nodes[size_t(p.fold_from[i]) + 2]->fparams[0] : 0.0f;
    c.fold_product = c.x_folded ? p.nodes[size_t(p.fold_from[i])] : nullptr;
    if (p.glu[i]) {
      op_mul_mat_glu(*t, *p.nodes[i + 1], *p.nodes[i + 2], c);
      i += 2;
      continue;
    }
    if (p.fold[i]) {
      op_mul_mat_fold_norm(*t, *p.nodes[i + 1], *p.nodes[i + 2], *p.nodes[i + 3], c);
      i += 3;
      continue;
    }
    if (p.fused[i] == 1) {
      op_rms_norm_mul(*t, *p.nodes[i + 1], c);
      ++i;
      continue;
    }
    if (p.fused[i] == 2) {
      op_add_rms_norm_mul(*t, *p.nodes[i + 1], *p.nodes[i + 2], c);
      i += 2;
      continue;
    }
    if (p.group[i] > 1 || !p.row_jobs[i].empty()) {
      c.row_jobs = p.row_jobs[i].empty() ? nullptr : p.row_jobs[i].data();
      op_mul_mat_group(&p.nodes[i], p.group[i], c);
      c.row_jobs = nullptr;
      i += p.span(i) - 1;
      continue;
    }
    switch (t->op) {
      case Op::GetRows: op_get_rows(*t, c); break;
      case Op::SetRows: op_set_rows(*t, c); break;
      case Op::MulMat: op_mul_mat(*t, c); break;
      case Op::RmsNorm: op_rms_norm(*t, c); break;
      case Op::Add:
      case Op::Mul: op_binary(*t, c); break;
      case Op::Scale: op_scale(*t, c); break;
      case Op::GeluMul:
      case Op::SiluMul: op_glu(*t, c); break;
      case Op::Rope: op_rope(*t, c); break;
      case Op::Attention: op_attention(*t, c); break;
      case Op::Sample: op_sample(*t, c); break;
      default: throw Error(std::string("cuda backend: no kernel for op ") + op_name(t->op));
    }
  }
  t_pdl_off = false;
}

namespace {

// What a profile line groups: the op, and for products and attention the
// shapes that set their cost.
std::string profile_key(const Tensor& t) {
  std::string k = op_name(t.op);
  if (t.op == Op::MulMat) {
    const Tensor& w = *t.src[0];
    k += " " + std::string(dtype_name(w.dtype)) + " " + std::to_string(w.ne[1]) + "x" + std::to_string(w.ne[0]) + " T" +
         std::to_string(t.n_rows());
  } else if (t.op == Op::Attention) {
    k += " D" + std::to_string(t.src[0]->ne[0]) + " Hq" + std::to_string(t.src[0]->ne[1]) + " T" +
         std::to_string(t.src[0]->ne[2]) + " S" + std::to_string(t.src[1]->ne[2]);
  } else {
    k += " T" + std::to_string(t.n_rows());
  }
  return k;
}

}  // namespace

namespace {

// Milliseconds per launch of exec: a warm-up, then reps launches between events.
double time_graph(cudaGraphExec_t exec, cudaStream_t s, int reps) {
  cudaEvent_t a, b;
  WEIR_CUDA_CHECK(cudaEventCreate(&a));
  WEIR_CUDA_CHECK(cudaEventCreate(&b));
  WEIR_CUDA_CHECK(cudaGraphLaunch(exec, s));
  WEIR_CUDA_CHECK(cudaEventRecord(a, s));
  for (int r = 0; r < reps; ++r) WEIR_CUDA_CHECK(cudaGraphLaunch(exec, s));
  WEIR_CUDA_CHECK(cudaEventRecord(b, s));
  WEIR_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  WEIR_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return double(ms) / reps;
}

}  // namespace

std::string CudaBackend::launch_label(const Plan& p, size_t i) {
  const std::string rows = " T" + std::to_string(p.nodes[i]->n_rows());
  std::string key = p.fold[i]         ? profile_key(*p.nodes[i]) + " +add+rms_norm+mul"
                    : p.fused[i] == 1 ? "rms_norm+mul" + rows
                    : p.fused[i] == 2 ? "add+rms_norm+mul" + rows
                    : p.rope_store[i] ? "rope/set_rows x" + std::to_string(p.rope_store[i]) + rows
                                      : profile_key(*p.nodes[i]);
  if (p.quantize_out[i]) key += " +q8";
  if (!p.row_jobs[i].empty()) key += " +rope/set_rows";
  if (p.glu[i])
    key += " +" + std::string(op_name(p.nodes[i + 2]->op)) + (mul_mat_quantizes_x(*p.nodes[i]) ? " +q8" : "");
  if (p.group[i] > 1) key = std::to_string(p.group[i]) + " x " + key;
  return key + (p.fold_from[i] >= 0 ? " (x folded)"
                : p.x_handed[i]     ? " (x handed)"
                : p.x_quantized[i]  ? " (x shared)"
                                    : "");
}

// Each node alone, recorded into a graph of its own and replayed: its kernels'
// time without launch gaps (its inputs are in the cache state the previous
// replays left). The whole graph's replay time next to the sum says what the
// gaps between kernels cost. Nodes are idempotent, so replaying is safe.
void CudaBackend::profile_plan(Plan& p) {
  const int reps = 10;
  const double whole = time_graph(p.exec, stream_, reps);
  double sum = 0;
  for (size_t i = 0; i < p.nodes.size(); i += p.span(i)) {
    if (p.skip[i]) continue;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    WEIR_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    launch_nodes(p, i, i + 1);
    WEIR_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    WEIR_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaGraphDestroy(graph);
    const double ms = time_graph(exec, stream_, reps);
    cudaGraphExecDestroy(exec);
    sum += ms;
    ProfileStat& st = profile_stats_[launch_label(p, i)];
    ++st.calls;
    st.ms += ms;
    for (int k = 0; k < p.group[i]; ++k)
      if (p.nodes[i + size_t(k)]->op == Op::MulMat) st.bytes += double(p.nodes[i + size_t(k)]->src[0]->n_bytes());
  }
  ProfileStat& g = profile_stats_["(whole graph replays)"];
  ++g.calls;
  g.ms += whole;
  std::fprintf(stderr, "weir CUDA profile: a graph of %zu nodes replays in %.3f ms; its nodes alone take %.3f ms\n",
               p.nodes.size(), whole, sum);
}

void CudaBackend::print_profile() const {
  std::vector<std::pair<std::string, ProfileStat>> v(profile_stats_.begin(), profile_stats_.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  double total = 0;
  for (const auto& [k, s] : v)
    if (k[0] != '(') total += s.ms;
  std::fprintf(stderr,
               "weir CUDA profile (%s): %.3f ms of kernels in the profiled graphs\n%-52s %8s %10s %9s %6s %9s\n",
               prop_.name, total, "node", "calls", "total ms", "us/call", "share", "GB/s");
  for (const auto& [k, s] : v)
    std::fprintf(stderr, "%-52s %8llu %10.3f %9.2f %5.1f%% %9.1f\n", k.c_str(), (unsigned long long)s.calls, s.ms,
                 1e3 * s.ms / double(s.calls), 100.0 * s.ms / total, s.bytes > 0 ? s.bytes / (s.ms * 1e-3) / 1e9 : 0.0);
}

void CudaBackend::run_graph(Graph& g) {
  auto it = plans_.find(&g);
  if (it == plans_.end()) throw Error("cuda backend: graph run before plan()");
  Plan& p = *it->second;
  WEIR_CUDA_CHECK(cudaSetDevice(device_));
  // The first run launches kernel by kernel (errors surface one at a time);
  // later runs replay a recording of the same launches.
  if (opts_.graphs && p.runs > 0) {
    if (!p.exec || p.exec_generation != scratch_generation_) {
      if (p.exec) cudaGraphExecDestroy(p.exec);
      p.exec = nullptr;
      cudaGraph_t graph = nullptr;
      WEIR_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      try {
        launch_nodes(p, 0, p.nodes.size());
      } catch (...) {
        cudaStreamEndCapture(stream_, &graph);
        if (graph) cudaGraphDestroy(graph);
        throw;
      }
      WEIR_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
      size_t n_nodes = 0;
      if (cudaGraphGetNodes(graph, nullptr, &n_nodes) == cudaSuccess) stats_.recorded_nodes = n_nodes;
      const cudaError_t e = cudaGraphInstantiate(&p.exec, graph, 0);
      cudaGraphDestroy(graph);
      WEIR_CUDA_CHECK(e);
      p.exec_generation = scratch_generation_;
      ++stats_.graphs_captured;
    }
    WEIR_CUDA_CHECK(cudaGraphLaunch(p.exec, stream_));
    ++stats_.graphs_replayed;
  } else {
    launch_nodes(p, 0, p.nodes.size());
  }
  ++p.runs;
  ++stats_.graphs_run;
  if (profile_ && p.exec && !p.profiled) {
    p.profiled = true;
    profile_plan(p);
  }
}

}  // namespace weir::cuda
