// NCCL, loaded when a GPU group first needs it (dlopen of libnccl.so.2):
// weir starts and runs on one GPU on hosts without NCCL, and its GPU groups
// say why NCCL is missing instead of failing to start. The types are
// nccl.h's (from the CUDA toolkit at build time).
#pragma once
#include <nccl.h>

#include <string>
#include <vector>

namespace weir::comm_cuda {

struct NcclApi {
  ncclResult_t (*GetVersion)(int*) = nullptr;
  ncclResult_t (*GetUniqueId)(ncclUniqueId*) = nullptr;
  ncclResult_t (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*CommInitAll)(ncclComm_t*, int, const int*) = nullptr;
  ncclResult_t (*CommDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*CommAbort)(ncclComm_t) = nullptr;
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*AllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) = nullptr;
  const char* (*GetErrorString)(ncclResult_t) = nullptr;
  std::string path;  // the library loaded
  int version = 0;   // e.g. 22809 for 2.28.9
};

// The NCCL of this process, loaded from the first of `candidates` that
// opens (once; later calls return it). Throws Error listing what was tried.
const NcclApi& nccl(const std::vector<std::string>& candidates);
// The default places: the loader's search path, then the CUDA toolkit's
// lib directories this weir was built against.
std::vector<std::string> default_nccl_candidates();

}  // namespace weir::comm_cuda
