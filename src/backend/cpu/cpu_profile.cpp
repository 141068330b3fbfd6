#include "backend/cpu/cpu_profile.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/dtype.h"

namespace weir::cpu {

namespace {

bool reads_weight(const Tensor& t) { return (t.op == Op::MulMat || t.op == Op::MulMatId) && t.src[0]; }

std::string key_of(const Tensor& t, const char* how) {
  std::string k = op_name(t.op);
  if (reads_weight(t)) {
    const Tensor& w = *t.src[0];
    k += std::string(" ") + dtype_name(w.dtype) + how + " " + std::to_string(w.ne[1]) + "x" +
         std::to_string(w.ne[0]);
  }
  return k + " T" + std::to_string(t.n_rows());
}

}  // namespace

void CpuProfile::add(const Tensor& t, const char* how, double seconds) {
  Stat& s = stats_[key_of(t, how)];
  ++s.calls;
  s.seconds += seconds;
  if (reads_weight(t)) {
    const Tensor& w = *t.src[0];
    s.weight_bytes += double(row_bytes(w.dtype, w.ne[0])) * double(w.ne[1]) * double(w.ne[2]);
  }
}

std::string CpuProfile::table(int threads) const {
  if (stats_.empty()) return "";
  std::vector<std::pair<std::string, Stat>> v(stats_.begin(), stats_.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double total = 0;
  for (const auto& [k, s] : v) total += s.seconds;
  std::string o;
  char buf[256];
  std::snprintf(buf, sizeof buf, "weir CPU profile (%d threads): %.3f ms in the profiled graphs\n%-44s %8s %10s %9s %6s %9s\n",
                threads, 1e3 * total, "node", "calls", "total ms", "us/call", "share", "GB/s");
  o += buf;
  for (const auto& [k, s] : v) {
    std::snprintf(buf, sizeof buf, "%-44s %8llu %10.3f %9.2f %5.1f%% %9.1f\n", k.c_str(), (unsigned long long)s.calls,
                  1e3 * s.seconds, 1e6 * s.seconds / double(s.calls), 100.0 * s.seconds / total,
                  s.weight_bytes > 0 ? s.weight_bytes / s.seconds / 1e9 : 0.0);
    o += buf;
  }
  return o;
}

}  // namespace weir::cpu
