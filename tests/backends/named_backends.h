// The backends the every-backend suite runs on, by name: the CPU (its exact
// float path), the chaos backend over the same, and CUDA.
#pragma once
#include <memory>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "backend/registry.h"
#include "chaos/chaos_backend.h"

namespace weir::test {

inline std::unique_ptr<Backend> make_named_backend(const std::string& name, int chaos_delay_us) {
  CpuOptions exact;
  exact.llama_rounding = false;
  if (name == "cpu") return std::make_unique<CpuBackend>(2, exact);
  if (name == "chaos") {
    ChaosOptions o;
    o.cpu = exact;
    o.max_delay_us = chaos_delay_us;
    return make_chaos_backend(o);
  }
  return make_cuda_backend(CudaOptions{});
}

}  // namespace weir::test
