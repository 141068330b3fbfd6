// GPU groups in a build without the CUDA backend or NCCL's header
// (comm/gpu_comm.h).
#include "comm/gpu_comm.h"
#include "core/error.h"

namespace weir {

bool gpu_comm_built() { return false; }
std::string gpu_comm_info() { return "none (built without CUDA or without nccl.h)"; }
std::vector<std::unique_ptr<Collective>> make_gpu_comms(const std::vector<int>&, const GpuCommOptions&) {
  throw Error("this weir was built without GPU collectives (the CUDA toolkit with NCCL's nccl.h)");
}

std::unique_ptr<Collective> make_gpu_comm_rank(int, int, int, const std::function<void(void*, size_t)>&,
                                               const GpuCommOptions&) {
  throw Error("this weir was built without GPU collectives (the CUDA toolkit with NCCL's nccl.h)");
}

}  // namespace weir
