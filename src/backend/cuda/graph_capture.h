// Recording a stream's work into a CUDA graph once and replaying it: a
// decode step then costs one launch on the host.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <functional>

namespace weir::cuda {

// The work `enqueue` puts on stream, recorded and instantiated (not run).
// nodes, if given: the recorded graph's node count.
cudaGraphExec_t capture_graph(cudaStream_t stream, const std::function<void()>& enqueue, size_t* nodes = nullptr);

// Milliseconds per replay of exec: a warm-up, then reps replays between events.
double time_graph(cudaGraphExec_t exec, cudaStream_t stream, int reps);

}  // namespace weir::cuda
