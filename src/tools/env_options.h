// The WEIR_* environment variables for comparisons and diagnostics, read
// into the components' options: tools/ is the one place that reads the
// environment. What each one does is said where its option is declared
// (backend/cuda_options.h, CpuOptions, BenchRunOptions, cpu/qdot.h).
#pragma once
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda_options.h"
#include "comm/gpu_comm.h"
#include "model/loader.h"

namespace weir::tools {

// The options for GPU `device`, with the WEIR_CUDA_* variables that are set.
CudaOptions cuda_options_from_env(int device = 0);
// WEIR_BARRIER=spin|adaptive, WEIR_ALL_BARRIERS=1 into CPU options.
void apply_cpu_env(CpuOptions* o);
// Default CPU options with those variables applied.
inline CpuOptions cpu_options_from_env() {
  CpuOptions o;
  apply_cpu_env(&o);
  return o;
}
// WEIR_LOAD_BUFFER_MB=N, WEIR_LOAD_THREADS=N: the loader's staging buffers
// and reader threads (for measuring other choices).
void apply_load_env(LoaderOptions* o);
// WEIR_NVLINK_MAX_KB=N (messages up to N KiB on the NVLink kernel, 0: NCCL
// only), WEIR_NCCL=path of libnccl.so.2: a GPU group's collectives.
GpuCommOptions gpu_comm_options_from_env();
// WEIR_PIPELINE=0: generation step by step (bench; for comparisons).
bool pipeline_from_env();
// Process-wide: WEIR_SIMD=reference|avx2|avx512 caps the CPU kernels' level;
// WEIR_PREFETCH=BYTES[,l1|l2|l3|nta] sets the K-quant kernels' prefetch
// (cpu::PrefetchPlan); WEIR_AMX_PREFETCH=N the AMX kernel's (steps ahead,
// cpu::set_amx_prefetch_steps). main calls it once, first; a bad value throws UsageError.
void apply_process_env();

}  // namespace weir::tools
