#include "comm/cuda/nccl_api.h"

#include <dlfcn.h>

#include <mutex>

#include "core/error.h"

namespace weir::comm_cuda {

std::vector<std::string> default_nccl_candidates() {
  std::vector<std::string> v = {"libnccl.so.2"};
#ifdef WEIR_CUDA_TOOLKIT_LIBS
  // The toolkit's directories (CMake: where it found nccl.h's library).
  std::string dirs = WEIR_CUDA_TOOLKIT_LIBS;
  for (size_t at = 0; at < dirs.size();) {
    const size_t end = dirs.find(':', at);
    const std::string d = dirs.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (!d.empty()) v.push_back(d + "/libnccl.so.2");
    if (end == std::string::npos) break;
    at = end + 1;
  }
#endif
  return v;
}

const NcclApi& nccl(const std::vector<std::string>& candidates) {
  static std::mutex m;
  static NcclApi api;
  static bool loaded = false;
  std::lock_guard<std::mutex> lk(m);
  if (loaded) return api;
  std::string tried;
  void* h = nullptr;
  for (const std::string& c : candidates) {
    h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h) {
      api.path = c;
      break;
    }
    tried += (tried.empty() ? "" : "; ") + c + ": " + dlerror();
  }
  if (!h) throw Error("NCCL is not there (" + tried + "); install it or point WEIR_NCCL at libnccl.so.2");
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
    if (!fn) throw Error(api.path + " lacks " + name);
  };
  sym(api.GetVersion, "ncclGetVersion");
  sym(api.GetUniqueId, "ncclGetUniqueId");
  sym(api.CommInitRank, "ncclCommInitRank");
  sym(api.CommInitAll, "ncclCommInitAll");
  sym(api.CommDestroy, "ncclCommDestroy");
  sym(api.CommAbort, "ncclCommAbort");
  sym(api.AllReduce, "ncclAllReduce");
  sym(api.AllGather, "ncclAllGather");
  sym(api.GetErrorString, "ncclGetErrorString");
  api.GetVersion(&api.version);
  loaded = true;
  return api;
}

}  // namespace weir::comm_cuda
