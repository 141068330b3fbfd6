#include "backend/cuda/launch_profiler.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "backend/cuda/graph_capture.h"

namespace weir::cuda {

void LaunchProfiler::profile(const LaunchPlan& p, cudaGraphExec_t whole_exec, cudaStream_t stream,
                             const std::function<void(size_t)>& run_one) {
  const int reps = 10;
  const double whole = time_graph(whole_exec, stream, reps);
  double sum = 0;
  for (size_t k = 0; k < p.launches.size(); ++k) {
    const Launch& l = p.launches[k];
    if (l.kind == LaunchKind::InOtherLaunch) continue;
    cudaGraphExec_t exec = capture_graph(stream, [&] { run_one(k); });
    const double ms = time_graph(exec, stream, reps);
    cudaGraphExecDestroy(exec);
    sum += ms;
    Stat& st = stats_[p.label(l)];
    ++st.calls;
    st.ms += ms;
    const size_t products = l.kind == LaunchKind::Products ? size_t(l.products) : l.kind == LaunchKind::ProductsGlu ? 2 : 1;
    for (size_t i = l.first; i < l.first + products; ++i)
      if (p.nodes[i]->op == Op::MulMat) st.bytes += double(p.nodes[i]->src[0]->n_bytes());
  }
  Stat& g = stats_["(whole graph replays)"];
  ++g.calls;
  g.ms += whole;
  std::fprintf(stderr, "weir CUDA profile: a graph of %zu nodes replays in %.3f ms; its launches alone take %.3f ms\n",
               p.nodes.size(), whole, sum);
}

void LaunchProfiler::print(const char* device_name) const {
  std::vector<std::pair<std::string, Stat>> v(stats_.begin(), stats_.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  double total = 0;
  for (const auto& [k, s] : v)
    if (k[0] != '(') total += s.ms;
  std::fprintf(stderr,
               "weir CUDA profile (%s): %.3f ms of kernels in the profiled graphs\n%-52s %8s %10s %9s %6s %9s\n",
               device_name, total, "launch", "calls", "total ms", "us/call", "share", "GB/s");
  for (const auto& [k, s] : v)
    std::fprintf(stderr, "%-52s %8llu %10.3f %9.2f %5.1f%% %9.1f\n", k.c_str(), (unsigned long long)s.calls, s.ms,
                 1e3 * s.ms / double(s.calls), 100.0 * s.ms / total, s.bytes > 0 ? s.bytes / (s.ms * 1e-3) / 1e9 : 0.0);
}

}  // namespace weir::cuda
