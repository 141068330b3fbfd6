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
#include "backend/cuda/launch_plan.h"
#include "backend/cuda/moe_ops.h"
#include "backend/cuda/pdl.h"
#include "core/collective.h"
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
  // Zero-filled from zero_from on (the whole buffer by default), on stream.
  DeviceBuffer(size_t n, MemoryRanges* owned, cudaStream_t stream, size_t zero_from = 0) : owned_(owned) {
    const cudaError_t e = cudaMalloc(&data_, n ? n : 1);
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw Error("cuda backend: cannot allocate " + std::to_string(n) + " bytes of device memory (" +
                  cudaGetErrorString(e) + ")");
    }
    if (zero_from < n) WEIR_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(data_) + zero_from, 0, n - zero_from, stream));
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
// What CUDA knows of p, for error messages.
std::string describe_pointer(const void* p) {
  char at[32];
  std::snprintf(at, sizeof at, "%p", p);
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return std::string(at) + " (unknown to CUDA)";
  }
  switch (a.type) {
    case cudaMemoryTypeDevice: return std::string(at) + " (GPU " + std::to_string(a.device) + " memory)";
    case cudaMemoryTypeHost: return std::string(at) + " (pinned host memory)";
    case cudaMemoryTypeManaged: return std::string(at) + " (managed memory)";
    default: return std::string(at) + " (host memory, not pinned)";
  }
}

class CudaQueue final : public Queue {
 public:
  CudaQueue(CudaBackend& b, cudaStream_t s, bool compute) : b_(b), s_(s), compute_(compute) {}
  void run(Graph& g) override {
    if (!compute_) throw Error("cuda backend: graphs run on the compute queue, not the copy queue");
    b_.run_graph(g);
  }
  void copy_to_device(void* dst, const void* src, size_t n) override {
    WEIR_CUDA_CHECK(cudaSetDevice(b_.device_));
    const cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s_);
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw Error("CUDA: copying " + std::to_string(n) + " bytes from " + describe_pointer(src) + " to " +
                  describe_pointer(dst) + " on GPU " + std::to_string(b_.device_) + ": " + cudaGetErrorString(e));
    }
  }
  void copy_to_device_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                         size_t rows) override {
    WEIR_CUDA_CHECK(cudaSetDevice(b_.device_));
    WEIR_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyHostToDevice, s_));
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

struct CudaBackend::Plan : LaunchPlan {
  void* arena = nullptr;
  size_t bytes = 0;
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
  profile_ = opts_.profile;
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  if (profile_) print_profile();
  if (stream_) cudaStreamSynchronize(stream_);
  if (copy_stream_) cudaStreamSynchronize(copy_stream_);
  plans_.clear();
  weights_ = WeightCopies(true);  // frees them, before the streams go
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
    case Op::MulMatId: return mul_mat_id_supported(t);
    case Op::TopK: return t.src[0]->ne[0] < (int64_t(1) << 30);
    case Op::MoeWeights: return t.ne[0] <= 32;
    case Op::MoeSum:
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
    case Op::AllReduce:
    case Op::AllGather:
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

// A weight's memory: its bytes and 16 bytes of zeroed slack (upload_weight
// says why). Only the slack is cleared, on the copy stream, so that the
// loader's copies, on the same stream, come after it; the compute stream
// sees both through the loader's wait.
std::unique_ptr<Buffer> CudaBackend::alloc_weight(size_t bytes) {
  WEIR_CUDA_CHECK(cudaSetDevice(device_));
  return std::make_unique<DeviceBuffer>(bytes + 16, &owned_, copy_stream_, bytes);
}

void CudaBackend::adopt_weight(const void* host, size_t bytes, std::unique_ptr<Buffer> w) {
  void* d = w->data();
  weights_.add(host, bytes, d, std::shared_ptr<Buffer>(std::move(w)), /*permanent=*/true);
  ++stats_.weights_adopted;
}

void CudaBackend::forget_weights(const void* begin, size_t n) {
  WEIR_CUDA_CHECK(cudaSetDevice(device_));
  cudaStreamSynchronize(stream_);  // no kernel still reads them
  weights_.forget(begin, n);
}

void CudaBackend::upload_weight(const Tensor& t) {
  const size_t n = t.n_bytes();
  if (weights_.find(t.data, n)) return;
  void* d = nullptr;
  // 16 bytes of slack: kernels read 2-byte-aligned blocks as aligned words,
  // up to one word past a row's last block.
  const cudaError_t e = cudaMalloc(&d, n + 16);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error("cuda backend: out of device memory copying weight '" + t.name + "' (" + std::to_string(n) +
                " bytes; " + std::to_string(weights_.bytes() >> 20) + " MiB of weights already on the GPU)");
  }
  // On the stream (DeviceBuffer says why): kernels launched after it see it.
  // A strided leaf (a column block of a weight) is packed on the way.
  if (t.is_contiguous())
    WEIR_CUDA_CHECK(cudaMemcpyAsync(d, t.data, n, cudaMemcpyHostToDevice, stream_));
  else
    WEIR_CUDA_CHECK(cudaMemcpy2DAsync(d, t.row_size(), t.data, t.nb[1], t.row_size(), size_t(t.n_rows()),
                                      cudaMemcpyHostToDevice, stream_));
  WEIR_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(d) + n, 0, 16, stream_));
  owned_.add(d, n + 16);
  MemoryRanges* owned = &owned_;
  weights_.add(t.data, n, d, std::shared_ptr<void>(d, [owned](void* p) {
                 owned->erase(p);
                 cudaFree(p);
               }));
  ++stats_.weights_copied_in_plan;
}

void CudaBackend::drop_plan(const Graph* g) {
  auto it = plans_.find(g);
  if (it == plans_.end()) return;
  cudaStreamSynchronize(stream_);  // its arena and weights may still be in use
  if (it->second->arena) owned_.erase(it->second->arena);
  weights_.release(*g);
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

void CudaBackend::plan(Graph& g) {
  WEIR_CUDA_CHECK(cudaSetDevice(device_));
  drop_plan(&g);  // planned again: the old plan goes
  auto& tensors = g.tensors();
  // Weights (leaves with host data) to device memory; leaves already in our
  // memory (the KV cache) are used in place.
  for (Tensor& t : tensors)
    if (t.op == Op::Leaf && t.data && !owns(t.data)) upload_weight(t);
  weights_.point_leaves(g, /*packed=*/true);

  auto plan = std::make_unique<Plan>();
  static_cast<LaunchPlan&>(*plan) = plan_launches(g, opts_);
  size_t scratch = 0;
  for (size_t s : plan->scratch) scratch = std::max(scratch, s);

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
  if (opts_.plan_dump)  // the launches (diagnostics)
    for (size_t i = 0; i < plan->nodes.size(); i += plan->span(i))
      if (!plan->skip[i]) std::fprintf(stderr, "plan %4zu: %s\n", i, plan->label(i).c_str());

  ensure(&scratch_, &scratch_bytes_, std::max<size_t>(scratch, 256));
  size_t fold = 0;
  for (size_t i = 0; i < plan->nodes.size(); ++i)
    if (plan->fold[i]) fold = std::max(fold, fold_norm_bytes(*plan->nodes[i]));
  if (fold) ensure(&fold_, &fold_bytes_, fold);
  size_t hand = 0;
  for (size_t i = 0; i < plan->nodes.size(); ++i)
    if (plan->glu[i] && mul_mat_quantizes_x(*plan->nodes[i]))
      hand = std::max(hand, glu_hand_bytes(*plan->nodes[i + 2]));
    else if (plan->moe[i] == LaunchPlan::Moe::ExpertGlu)
      hand = std::max(hand, expert_glu_hand_bytes(*plan->nodes[i + 2]));
  if (hand) ensure(&hand_, &hand_bytes_, hand);
  // Collectives make their device buffers now: none may be made while the
  // graph is recorded.
  for (const Tensor* t : plan->nodes)
    if (t->op == Op::AllReduce || t->op == Op::AllGather) t->comm->prepare(size_t(t->n_elements()));
  stats_.planned_launches = plan->launches();
  plans_[&g] = std::move(plan);
}

void CudaBackend::release(const Graph& g) { drop_plan(&g); }

size_t CudaBackend::planned_bytes(const Graph& g) const {
  auto it = plans_.find(&g);
  return it == plans_.end() ? 0 : it->second->bytes;
}

// Launches nodes [begin, end); a fused pair starting before end runs whole.
void CudaBackend::launch_nodes(Plan& p, size_t begin, size_t end) {
  OpCtx c;
  c.opts = &opts_;
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
    t_pdl = pdl_supported() && opts_.pdl && !pdl_off_for(t->op, opts_.pdl_off_ops) &&
            !pdl_off_for_node(i, opts_.pdl_nodes);
    if (p.rope_store[i] > 0) {
      RopeStoreNode jobs[8];
      int nj = 0;
      for (size_t k = i; k < i + size_t(p.rope_store[i]); ++k)
        if (!p.skip[k])
          jobs[nj++] = {p.nodes[k], p.rope_into[k] >= 0 ? p.nodes[size_t(p.rope_into[k])] : nullptr,
                        p.rope_norm[k] >= 0 ? p.nodes[size_t(p.rope_norm[k])] : nullptr,
                        p.rope_scale[k] >= 0 ? p.nodes[size_t(p.rope_scale[k])] : nullptr,
                        p.rope_bias[k] >= 0 ? p.nodes[size_t(p.rope_bias[k])] : nullptr};
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
    switch (p.moe[i]) {
      case LaunchPlan::Moe::None: break;
      case LaunchPlan::Moe::Route: op_route(*t, *p.nodes[i + 1], c); break;
      case LaunchPlan::Moe::ExpertGlu: op_expert_glu(*t, *p.nodes[i + 1], *p.nodes[i + 2], c); break;
      case LaunchPlan::Moe::DownSum: op_expert_down_sum(*t, *p.nodes[i + 1], c); break;
    }
    if (p.moe[i] != LaunchPlan::Moe::None) {
      i += p.span(i) - 1;
      continue;
    }
    if (p.norm_chain[i]) {
      op_norm_add_norm(*t, *p.nodes[i + 1], *p.nodes[i + 2], *p.nodes[i + 3], *p.nodes[i + 4], c);
      i += 4;
      continue;
    }
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
      case Op::TopK: op_top_k(*t, c); break;
      case Op::MoeWeights: op_moe_weights(*t, c); break;
      case Op::MulMatId: op_mul_mat_id(*t, c); break;
      case Op::MoeSum: op_moe_sum(*t, c); break;
      // The group's collectives, queued on this stream (recorded with the
      // rest of the graph): core/collective.h, comm/gpu_comm.h.
      case Op::AllReduce:
        t->comm->all_reduce_sum(static_cast<const float*>(t->src[0]->data), static_cast<float*>(t->data),
                                size_t(t->n_elements()), stream_);
        break;
      case Op::AllGather:
        t->comm->all_gather_rows(static_cast<const float*>(t->src[0]->data), size_t(t->src[0]->ne[0]),
                                 static_cast<float*>(t->data), size_t(t->ne[0]), t->ne[0], t->ne[1], stream_);
        break;
      default: throw Error(std::string("cuda backend: no kernel for op ") + op_name(t->op));
    }
  }
  t_pdl = false;
}

namespace {

// What a profile line groups: the op, and for products and attention the
// shapes that set their cost.

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
    ProfileStat& st = profile_stats_[p.label(i)];
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

// The recording of p's launches, made again when scratch memory moved.
void CudaBackend::record(Plan& p) {
  if (p.exec && p.exec_generation == scratch_generation_) return;
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

void CudaBackend::prepare_run(Graph& g) {
  auto it = plans_.find(&g);
  if (it == plans_.end()) throw Error("cuda backend: graph prepared before plan()");
  WEIR_CUDA_CHECK(cudaSetDevice(device_));
  if (opts_.graphs && it->second->runs > 0) record(*it->second);
}

void CudaBackend::run_graph(Graph& g) {
  auto it = plans_.find(&g);
  if (it == plans_.end()) throw Error("cuda backend: graph run before plan()");
  Plan& p = *it->second;
  WEIR_CUDA_CHECK(cudaSetDevice(device_));
  // The first run launches kernel by kernel (errors surface one at a time);
  // later runs replay a recording of the same launches.
  if (opts_.graphs && p.runs > 0) {
    record(p);
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
