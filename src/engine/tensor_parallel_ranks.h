// Tensor parallelism's backends (--tp N): N CPU ranks splitting -t's
// threads (a thread communicator), N GPUs of this process (NCCL and the
// NVLink all-reduce), or under mpirun this process's rank (CPU, or its GPU);
// each rank's backend gets the weight parts its graphs read (model/shard.h).
#pragma once
#include "engine/runtime.h"

namespace weir {

// spec.tp ranks (spec.world's size under mpirun); spec.devices are the GPUs
// with -ngl past the layers. UsageError for a split between CPU and GPU or
// -ot rules; Error for GPUs that are missing or too small.
ModelBackends make_tensor_parallel_ranks(const Model& m, const RuntimeSpec& spec);

}  // namespace weir
