// Collectives between GPUs of one process, one rank a GPU (threads), on
// each rank's CUDA stream and inside CUDA graph recordings:
//  - small messages (decode's all-reduces, a few KB) by a one-shot kernel
//    over NVLink peer memory: each rank writes its part into every rank's
//    buffer, raises a flag there, waits for every rank's flag in its own,
//    and adds the parts in rank order (the same bits on every rank; no
//    NVLink multicast);
//  - larger ones by NCCL (from the CUDA toolkit; optional at build time).
// Built with the CUDA backend when NCCL is found; otherwise
// gpu_comm_built() is false and make_gpu_comms throws Error saying why.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/collective.h"

namespace weir {

struct GpuCommOptions {
  // Messages up to this many bytes take the NVLink kernel (0: NCCL only);
  // larger ones NCCL. Peer access must be possible between every pair.
  // kNvlinkAuto: where the two cross on H100s with NVLink 4 (docs/perf.md,
  // 2026-11-26): 512 KiB for 2 GPUs, 192 KiB for more.
  static constexpr size_t kNvlinkAuto = ~size_t(0);
  size_t nvlink_max_bytes = kNvlinkAuto;
  bool nccl = true;  // false: the NVLink kernel only (messages must fit it)
  int timeout_ms = 60000;  // a rank that never comes: the NVLink kernel traps
  // Where libnccl.so.2 is (tried in order); empty: the loader's search
  // path, then the CUDA toolkit's lib directories.
  std::vector<std::string> nccl_library;
};

bool gpu_comm_built();
// What the build has: "NCCL 2.27.7 + NVLink one-shot" or why not.
std::string gpu_comm_info();
// Rank r's end is element r, on GPU devices[r].
std::vector<std::unique_ptr<Collective>> make_gpu_comms(const std::vector<int>& devices, const GpuCommOptions& o = {});
// This process's end of a group of `size` processes (mpirun), rank `rank`
// on GPU `device`: NCCL for every message (NVLink peer memory is not shared
// between processes here), started from the unique id that rank 0 makes and
// `broadcast` (bytes from rank 0 to every rank, e.g. MPI's) sends to all.
std::unique_ptr<Collective> make_gpu_comm_rank(int device, int rank, int size,
                                               const std::function<void(void*, size_t)>& broadcast,
                                               const GpuCommOptions& o = {});

}  // namespace weir
