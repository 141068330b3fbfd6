#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_queue.h"
#include "backend/cuda/plan/kernel_limits.h"
#include "backend/cuda/plan/launch_memory.h"
#include "core/collective.h"
#include "core/error.h"
#include "core/graph.h"

namespace weir::cuda {
namespace {

constexpr size_t kCublasWorkspace = size_t(32) << 20;

}  // namespace

CudaBackend::GraphPlan::~GraphPlan() {
  if (exec) cudaGraphExecDestroy(exec);
  if (arena) cudaFree(arena);
}

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
  queue_ = std::make_unique<CudaQueue>(device_, stream_, stats_, [this](Graph& g) { run_graph(g); });
  copy_queue_ = std::make_unique<CudaQueue>(device_, copy_stream_, stats_, nullptr);
  if (opts_.profile) profiler_ = std::make_unique<LaunchProfiler>();
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  if (profiler_) profiler_->print(prop_.name);
  if (stream_) cudaStreamSynchronize(stream_);
  if (copy_stream_) cudaStreamSynchronize(copy_stream_);
  plans_.clear();
  weights_ = WeightCopies(true);  // frees them, before the streams go
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
    case Op::MulMat:  // the types with device kernels (plan/kernel_limits.h: has_dequantizer)
    case Op::GetRows: return has_dequantizer(t.src[0]->dtype);
    case Op::MulMatId: return mul_mat_id_supported(t);
    case Op::TopK: return t.src[0]->ne[0] < (int64_t(1) << 30);
    case Op::MoeWeights: return t.ne[0] <= 32;
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

void CudaBackend::grow_shared(SharedDeviceBuffer& b, size_t bytes) {
  if (b.grow(bytes, stream_)) ++shared_generation_;  // graphs recorded with the old memory must be recorded again
}

OpCtx CudaBackend::op_context() const {
  OpCtx c;
  c.opts = &opts_;
  c.stream = stream_;
  c.cublas = cublas_;
  c.scratch = scratch_.data();
  c.scratch_bytes = scratch_.bytes();
  c.sm_count = prop_.multiProcessorCount;
  c.deferred_norm = deferred_norm_.data();
  c.deferred_norm_capacity = deferred_norm_.bytes();
  c.glu_q8 = glu_q8_.data();
  c.glu_q8_capacity = glu_q8_.bytes();
  return c;
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

  auto plan = std::make_unique<GraphPlan>();
  plan->launches = plan_launches(g, opts_);
  const LaunchPlan& lp = plan->launches;
  // Activation memory (backend/activation_plan.h says why by launch).
  const ActivationPlan act = plan_launch_memory(g, lp);
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
  place_activations(g, act, plan->arena);
  check_launch_memory(lp);
  if (opts_.plan_dump)  // the launches (diagnostics)
    for (const Launch& l : lp.launches)
      if (l.kind != LaunchKind::InOtherLaunch) std::fprintf(stderr, "plan %4zu: %s\n", l.first, lp.label(l).c_str());

  grow_shared(scratch_, std::max<size_t>(lp.scratch_bytes, 256));
  if (lp.deferred_norm_bytes) grow_shared(deferred_norm_, lp.deferred_norm_bytes);
  if (lp.glu_q8_bytes) grow_shared(glu_q8_, lp.glu_q8_bytes);
  // Collectives make their device buffers now: none may be made while the
  // graph is recorded.
  for (const Tensor* t : lp.nodes)
    if (t->op == Op::AllReduce || t->op == Op::AllGather) t->comm->prepare(size_t(t->n_elements()));
  stats_.planned_launches = lp.kernel_launches();
  plans_[&g] = std::move(plan);
}

void CudaBackend::release(const Graph& g) { drop_plan(&g); }

size_t CudaBackend::planned_bytes(const Graph& g) const {
  auto it = plans_.find(&g);
  return it == plans_.end() ? 0 : it->second->bytes;
}

}  // namespace weir::cuda
