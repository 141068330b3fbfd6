#include "backend/cuda/graph_capture.h"

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/run_launches.h"
#include "core/error.h"

namespace weir::cuda {

cudaGraphExec_t capture_graph(cudaStream_t stream, const std::function<void()>& enqueue, size_t* nodes) {
  cudaGraph_t graph = nullptr;
  WEIR_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue();
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  WEIR_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  if (nodes && cudaGraphGetNodes(graph, nullptr, nodes) != cudaSuccess) *nodes = 0;
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  WEIR_CUDA_CHECK(e);
  return exec;
}

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

// The recording of p's launches, made again when the shared memory moved.
void CudaBackend::record(GraphPlan& p) {
  if (p.exec && p.exec_generation == shared_generation_) return;
  if (p.exec) cudaGraphExecDestroy(p.exec);
  p.exec = nullptr;
  size_t nodes = 0;
  p.exec = capture_graph(stream_, [&] { run_launches(p.launches, 0, p.launches.launches.size(), op_context()); },
                         &nodes);
  if (nodes) stats_.recorded_nodes = nodes;
  p.exec_generation = shared_generation_;
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
  GraphPlan& p = *it->second;
  WEIR_CUDA_CHECK(cudaSetDevice(device_));
  // The first run launches kernel by kernel (errors surface one at a time);
  // later runs replay a recording of the same launches.
  if (opts_.graphs && p.runs > 0) {
    record(p);
    WEIR_CUDA_CHECK(cudaGraphLaunch(p.exec, stream_));
    ++stats_.graphs_replayed;
  } else {
    run_launches(p.launches, 0, p.launches.launches.size(), op_context());
  }
  ++p.runs;
  ++stats_.graphs_run;
  if (profiler_ && p.exec && !p.profiled) {
    p.profiled = true;
    profiler_->profile(p.launches, p.exec, stream_,
                       [&](size_t k) { run_launches(p.launches, k, k + 1, op_context()); });
  }
}

}  // namespace weir::cuda
